"""Who computes the unfinished cells of a sweep: this process, a local pool of processes, or a Ray cluster.

An executor takes ``{name: cell}`` (zero-argument callables returning a dict) and yields an :class:`Outcome` per cell
*as it finishes*; the driver (``Run.sweep``) alone writes the cell files, so a lost worker, a killed driver or Ctrl-C
loses only the cells still running, and rerunning the same command with any executor resumes.

- :class:`LocalExecutor` (``--executor local``, the default): in this process, one cell after another.
- :class:`ProcessExecutor` (``--executor processes --workers N``): a pool of N spawned worker processes.
- :class:`RayExecutor` (``--executor ray [--address ADDR] [--cpus-per-cell K]``): one Ray task per cell.

Why the numbers are the same whatever the executor: docs/architecture.md, "The experiment contract".
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
import logging
import math
import multiprocessing
import os
import socket
import time
import urllib.parse
import warnings
from collections.abc import Iterator

from memlab.checks import check_int
from memlab.devices import DEVICES_PER_CORE, default_devices
from memlab.run_folder import SetupError
from memlab.worker import (
    Cells,
    Outcome,
    Settings,
    compute_cell,
    compute_pickled,
    named_cells,
    pickled,
    start_pool_worker,
)

__all__ = ["EXECUTORS", "ClusterLost", "Executor", "LocalExecutor", "ProcessExecutor", "RayExecutor", "make_executor"]

EXECUTORS = ("local", "processes", "ray")
RAY_MISSING = 'the ray executor needs Ray: pip install -e ".[ray]" (or pip install "memlab[ray]")'


class Executor:
    """Base class: ``run(cells, settings)`` yields Outcomes as cells finish; ``close()`` frees the workers.

    ``cells`` (a mapping, or an iterable of (name, cell) pairs) is read one cell at a time as a worker comes free
    (the Ray executor reads it at once and leaves the scheduling to the cluster).

    A generator from ``run`` that is closed early (Ctrl-C in the driver) stops the cells still running. Between
    the cells' Outcomes it may yield their progress lines (``Outcome.progress``; ``memlab.progress``).
    """

    name = "executor"

    def run(self, cells: Cells, settings: Settings) -> Iterator[Outcome]:
        raise NotImplementedError

    def close(self) -> None:
        """Free workers; the executor can still be used afterwards (it starts them again)."""

    def devices_per_cell(self) -> int:
        """JAX CPU devices for each cell's process: the cores a cell has to itself (``memlab.devices``)."""
        return default_devices()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LocalExecutor(Executor):
    """Cells in this process, one after another (``--executor local``)."""

    name = "local"

    def run(self, cells, settings):
        for name, cell in named_cells(cells):  # progress lines go straight to the driver's display
            text, error = compute_cell(cell, settings, name)
            yield Outcome(name, text, error)


PROGRESS_POLL_S = 0.5  # how often a driver waiting for its workers shows the progress lines they sent


class ProcessExecutor(Executor):
    """A pool of ``workers`` spawned processes on this machine (``--executor processes --workers N``).

    Spawned, not forked: JAX's threads do not survive a fork. A worker pays one import of JAX and its own
    compiles (the persistent compile cache shares them between workers and runs).
    """

    name = "processes"

    def __init__(self, workers: int | None = None):
        self.workers = check_int("workers", (os.cpu_count() or 1) if workers is None else workers)
        self._pool: futures.ProcessPoolExecutor | None = None
        self._lines = None  # the queue the workers send their cells' progress lines through

    def devices_per_cell(self) -> int:
        return default_devices(self.workers)  # the workers share this machine's cores

    def _ensure_pool(self) -> futures.ProcessPoolExecutor:
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._lines = context.SimpleQueue()
            self._pool = futures.ProcessPoolExecutor(self.workers, mp_context=context, initializer=start_pool_worker,
                                                     initargs=(self._lines.put,))
        return self._pool

    def _sent_lines(self) -> Iterator[Outcome]:
        """The progress lines the workers have sent so far."""
        while self._lines is not None and not self._lines.empty():
            yield Outcome("", progress=self._lines.get())

    def run(self, cells, settings):
        """Cells go to the workers one at a time as workers come free (``workers`` in flight), so each is pickled
        when it starts, with what the driver knows then (``Scheduled``: the times of the cells finished so far)."""
        pool = self._ensure_pool()
        waiting, running, done = pickled(cells), {}, []
        healthy = False
        try:
            while True:
                while len(running) < self.workers:
                    name, blob, why = next(waiting, (None, None, None))
                    if name is None:
                        break
                    if why:
                        yield Outcome(name, error=why)
                        continue
                    try:
                        running[pool.submit(compute_pickled, blob, settings, name)] = name
                    except futures.process.BrokenProcessPool as e:  # a worker died before: the pool is gone
                        yield Outcome(name, error=f"the worker process was lost ({e})")
                if not running:
                    break
                finished = ()
                while not finished:
                    finished, _ = futures.wait(running, timeout=PROGRESS_POLL_S, return_when=futures.FIRST_COMPLETED)
                    yield from self._sent_lines()
                for future in finished:
                    name = running.pop(future)
                    done.append(future)
                    try:
                        text, error = future.result()
                    except futures.process.BrokenProcessPool as e:  # a worker died (killed, out of memory)
                        text, error = None, f"the worker process was lost ({e})"
                    yield Outcome(name, text, error)
            healthy = all(f.exception() is None for f in done)
        finally:
            if not healthy:  # interrupted, or a pool that lost a worker: stop it (a new one starts on demand)
                self._terminate()

    def _terminate(self) -> None:
        """Stop every worker now (they hold only unfinished cells)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list(getattr(pool, "_processes", {}).values())  # no public way before Python 3.14
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            with contextlib.suppress(Exception):
                process.terminate()
        for process in processes:
            with contextlib.suppress(Exception):
                process.join(timeout=5)

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _connect_timeout() -> float:
    """Seconds to wait for a Ray cluster's address to answer: $MEMLAB_RAY_CONNECT_TIMEOUT, default 30."""
    text = os.environ.get("MEMLAB_RAY_CONNECT_TIMEOUT", "30")
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds > 0:
        raise ValueError(f"MEMLAB_RAY_CONNECT_TIMEOUT must be a positive number of seconds, got {text!r}")
    return seconds


def _check_reachable(address: str | None) -> None:
    """ValueError unless the host:port of a Ray ``address`` (``host:port`` or ``ray://host:port``) accepts a
    connection within :func:`_connect_timeout`: Ray itself waits for an unreachable cluster without end."""
    if address in (None, "local", "auto"):
        return
    parts = urllib.parse.urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number
        host, port = None, None
    if not host or port is None:
        raise ValueError(f"--address must be 'auto', host:port or ray://host:port, got {address!r}")
    timeout = _connect_timeout()
    try:
        with socket.create_connection((host, port), timeout=timeout) as connection:
            is_grpc = _answers_as_grpc(connection, timeout)
    except TimeoutError:
        raise ValueError(f"no Ray cluster answered at {address} within {timeout:g} s (MEMLAB_RAY_CONNECT_TIMEOUT); "
                         "check the address and that the cluster runs (ray status)") from None
    except OSError as e:
        raise ValueError(f"no Ray cluster at {address}: {e.strerror or e}; check the address and that the cluster "
                         "runs (ray status)") from None
    if not is_grpc:
        raise ValueError(f"{address} accepts connections but is no Ray head (it did not answer as a gRPC server "
                         f"within {timeout:g} s); give a head's GCS address (host:6379) or ray://host:10001")


# an HTTP/2 client's connection preface and an empty SETTINGS frame (RFC 9113, 3.4 and 6.5)
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _answers_as_grpc(connection: socket.socket, timeout: float) -> bool:
    """Whether the server on ``connection`` answers an HTTP/2 preface with a SETTINGS frame, as every gRPC server
    (Ray's GCS and its client server among them) does first: Ray's own connect to anything else hangs or ends in a
    long traceback."""
    connection.settimeout(timeout)
    header, deadline = b"", time.monotonic() + timeout
    with contextlib.suppress(OSError):  # reset, or silent until the timeout: not a gRPC server
        connection.sendall(_HTTP2_PREFACE)
        while len(header) < 9 and time.monotonic() < deadline:
            chunk = connection.recv(9 - len(header))
            if not chunk:
                break
            header += chunk
    return len(header) == 9 and header[3] == 0x4  # a frame header: 3 bytes length, then its type


CLUSTER_POLL_S = 5.0  # how often a run waiting for Ray tasks checks that the cluster's head still answers


class ClusterLost(RuntimeError):
    """The Ray cluster went away mid-run; the cells finished before are kept."""


@contextlib.contextmanager
def _quiet_token_notice():
    """Without Ray's notice that it turned token authentication on (its default since 2.59, on every run; a notice,
    not a problem); Ray's other warnings pass."""
    logger = logging.getLogger("ray._private.authentication.authentication_token_setup")

    def drop(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled")

    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


class RayExecutor(Executor):
    """One Ray task per cell (``--executor ray``), each reserving ``cpus_per_cell`` CPUs.

    ``address``: ``None`` starts a local Ray instance (stopped again by :meth:`close`); ``"auto"`` joins the
    cluster started on this machine with ``ray start --head``; ``"host:6379"`` (a head's GCS address) or
    ``"ray://host:10001"`` (Ray Client) joins a remote one; ValueError if that address accepts no connection within
    $MEMLAB_RAY_CONNECT_TIMEOUT seconds (default 30). If Ray is already initialised in this process, its cluster is
    used as it is.
    """

    name = "ray"

    def __init__(self, address: str | None = None, cpus_per_cell: float = 1):
        try:
            import ray
        except ImportError as e:
            raise ValueError(RAY_MISSING) from e
        if not isinstance(cpus_per_cell, (int, float)) or isinstance(cpus_per_cell, bool) or cpus_per_cell <= 0:
            raise ValueError(f"cpus_per_cell must be a positive number, got {cpus_per_cell!r}")
        self.address = address
        self.cpus_per_cell = cpus_per_cell
        self._started = self._lost = False
        if address in (None, "local") and not ray.is_initialized() and cpus_per_cell > (os.cpu_count() or 1):
            raise ValueError(f"cpus_per_cell must be at most this machine's {os.cpu_count() or 1} CPUs (a local Ray "
                             f"instance has no more), got {cpus_per_cell:g}: no cell could ever start")
        if not ray.is_initialized():
            _check_reachable(address)
        else:  # the cluster is known now: refuse before anything is written
            self._check_feasible(ray)

    def devices_per_cell(self) -> int:
        # the CPUs each cell reserves, wherever it runs, within the devices a process may have (memlab.devices)
        return min(max(1, int(self.cpus_per_cell)), DEVICES_PER_CORE * (os.cpu_count() or 1))

    def _ensure_ray(self):
        import ray

        if not ray.is_initialized():
            env = {k: os.environ[k] for k in ("XLA_FLAGS", "JAX_ENABLE_X64") if k in os.environ}
            remote = self.address not in (None, "local")
            with warnings.catch_warnings(), _quiet_token_notice():  # Ray forks its services, which JAX warns about
                warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
                ray.init(address=self.address or "local", include_dashboard=False, log_to_driver=False,
                         runtime_env={"env_vars": env} if env and remote else None, logging_level="warning")
            self._started = True
        return ray

    def run(self, cells, settings):
        """The cells' progress lines come through a queue (a Ray actor of this run) that the tasks put them in and
        the driver reads while it waits, as the process pool's workers send theirs (Ray's own forwarding of a
        worker's stdout is off: it would print JAX's and Ray's noise too, past the driver's display)."""
        ray, task, submitted, lines = None, None, {}, None
        for name, blob, why in pickled(cells):
            if why:
                yield Outcome(name, error=why)
                continue
            if task is None:  # connect only once there is a cell to send (a sweep may take none: another run has them)
                ray = self._ensure_ray()
                self._check_feasible(ray)
                task = ray.remote(num_cpus=self.cpus_per_cell)(compute_pickled)
                lines = self._line_queue() if settings.cell_progress else None
            submitted[task.remote(blob, settings, name, None if lines is None else lines.put)] = name
        pending, checked = list(submitted), time.monotonic()
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1, timeout=PROGRESS_POLL_S)
                yield from self._sent_lines(lines)
                if not done and time.monotonic() - checked >= CLUSTER_POLL_S:
                    self._check_alive(ray)
                    checked = time.monotonic()
                for ref in done:
                    try:
                        text, error = ray.get(ref)
                    except Exception as e:  # the worker or its node was lost beyond Ray's retries
                        text, error = None, f"the Ray task was lost ({type(e).__name__}: {e})"
                    yield Outcome(submitted[ref], text, error)
        finally:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            if lines is not None and not self._lost:
                with contextlib.suppress(Exception):
                    lines.shutdown()

    @staticmethod
    def _line_queue():
        """A queue for the cells' progress lines: an actor that holds no CPU, so it never keeps a cell waiting."""
        from ray.util.queue import Queue
        return Queue(actor_options={"num_cpus": 0})

    @staticmethod
    def _sent_lines(lines) -> Iterator[Outcome]:
        """The progress lines the tasks have sent so far."""
        sent = []
        with contextlib.suppress(Exception):  # a lost queue loses only lines
            waiting = 0 if lines is None else lines.qsize()
            sent = lines.get_nowait_batch(waiting) if waiting else []
        for line in sent:
            yield Outcome("", progress=line)

    def _check_alive(self, ray) -> None:
        """ClusterLost if the cluster's head (its GCS) accepts no connection: Ray would notice only after a minute,
        and then end this process from C++."""
        address = ray.get_runtime_context().gcs_address
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=CLUSTER_POLL_S).close()
        except OSError:
            self._lost = True
            raise ClusterLost(f"the Ray cluster is lost (its head at {address} no longer answers)") from None

    def _check_feasible(self, ray) -> None:
        """SetupError unless some node of the cluster has ``cpus_per_cell`` CPUs: Ray would wait for one forever."""
        largest = max((node["Resources"].get("CPU", 0) for node in ray.nodes() if node.get("Alive")), default=0)
        if self.cpus_per_cell > largest:
            raise SetupError(f"--cpus-per-cell {self.cpus_per_cell:g} is more than any node of the Ray cluster has "
                             f"(at most {largest:g} CPUs): no cell could ever start")

    def close(self):
        if self._started and not self._lost:  # a lost cluster cannot be shut down: Ray would wait for its head
            import ray

            ray.shutdown()
            self._started = False


def make_executor(name: str = "local", workers: int | None = None, address: str | None = None,
                  cpus_per_cell: float | None = None) -> Executor:
    """The executor called ``name``; ValueError for an unknown name or an option it does not take."""
    if name not in EXECUTORS:
        raise ValueError(f"unknown executor {name!r}; known: {', '.join(EXECUTORS)}")
    if workers is not None and name != "processes":
        raise ValueError("--workers goes with --executor processes")
    if (address is not None or cpus_per_cell is not None) and name != "ray":
        raise ValueError("--address and --cpus-per-cell go with --executor ray")
    if name == "processes":
        return ProcessExecutor(workers)
    if name == "ray":
        return RayExecutor(address, 1 if cpus_per_cell is None else cpus_per_cell)
    return LocalExecutor()
