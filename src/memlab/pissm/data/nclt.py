"""Loader for the NCLT robot-localisation data (section 7 "Real World Dynamics", App. G.3, H.2).

Reads one session's GPS fixes (``gps.csv`` / ``gps_rtk.csv``) and ground truth (``groundtruth_<date>.csv``) from
``data_dir`` and makes the state x = [p_1, v_1, p_2, v_2] of eq. (203)-(204), observed in position, split as App. G.3
(``NCLT_LAYOUT``). Malformed files raise a ValueError naming the file, the line and the reason.

Choices the paper leaves open:

- the metric frame of the NCLT development kit, so GPS and ground truth share an origin;
- 1 Hz: the first valid fix of every second, the ground truth interpolated at its time, the velocity a central
  difference over +- 0.5 s;
- steps beyond the layout's are dropped; R is the covariance of y - C x over the training split.

The file layout and each step with its reason: docs/studies/pissm.md, "NCLT".
"""

from __future__ import annotations

import math
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from memlab.checks import check_choice
from memlab.pissm.data.splits import Dataset, Split, SplitLayout, cut_recording

NCLT_URL = "http://robots.engin.umich.edu/nclt/"
NCLT_LAYOUT = SplitLayout(train=(18, 200), validation=(2, 200), test=(1, 280))
GPS_COLUMNS = ("utime", "mode", "num_sats", "lat", "lng", "alt", "track", "speed")
GROUND_TRUTH_COLUMNS = ("utime", "x", "y", "z", "roll", "pitch", "yaw")
LAT0, LNG0 = 0.738167915410646, -1.46098650670922  # NCLT development kit, read_gps.py
EARTH_EQUATORIAL, EARTH_POLAR = 6378135.0, 6356750.0
OBSERVATION_MATRIX = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])


class NCLTDataMissingError(FileNotFoundError):
    """The session's files are not under data_dir; the message says in one line where to get them."""


def read_csv(path: Path, columns: tuple[str, ...]) -> np.ndarray:
    """A header-less numeric CSV -> float64 (rows, len(columns)); ValueError naming file, line and reason."""
    lines = Path(path).read_text().splitlines()
    if not lines:
        raise ValueError(f"{path}: the file is empty, expected {len(columns)} columns {', '.join(columns)}")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise ValueError(f"{path}: line {number}: empty line")
    try:
        data = np.loadtxt(lines, delimiter=",", comments=None, ndmin=2, dtype=np.float64)
    except ValueError:
        data = None
    if data is None or data.shape[1] != len(columns):
        _raise_first_bad_line(path, lines, columns)
    time = data[:, 0]
    bad = np.flatnonzero(~np.isfinite(time))
    if bad.size:
        raise ValueError(f"{path}: line {bad[0] + 1}: time {columns[0]} is {time[bad[0]]}, expected a finite number")
    back = np.flatnonzero(np.diff(time) < 0)
    if back.size:
        i = back[0] + 1
        raise ValueError(f"{path}: line {i + 1}: time goes backwards ({time[i]:.0f} after {time[i - 1]:.0f})")
    return data


def _raise_first_bad_line(path: Path, lines: list[str], columns: tuple[str, ...]):
    for number, line in enumerate(lines, start=1):
        fields = line.split(",")
        if len(fields) != len(columns):
            raise ValueError(
                f"{path}: line {number}: expected {len(columns)} comma-separated columns "
                f"({', '.join(columns)}), got {len(fields)}"
            )
        for name, field in zip(columns, fields):
            try:
                float(field)
            except ValueError:
                raise ValueError(f"{path}: line {number}: column {name} is not a number: {field.strip()!r}") from None
    raise ValueError(f"{path}: could not be parsed as {len(columns)} numeric columns")  # not reached on CSV text


def gps_to_local(lat: np.ndarray, lng: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """lat, lng (radians) -> (north, east) metres in the NCLT ground-truth frame (development-kit linearisation)."""
    denominator = (EARTH_EQUATORIAL * math.cos(LAT0)) ** 2 + (EARTH_POLAR * math.sin(LAT0)) ** 2
    r_ns = (EARTH_EQUATORIAL * EARTH_POLAR) ** 2 / denominator**1.5
    r_ew = EARTH_EQUATORIAL**2 / denominator**0.5
    return np.sin(lat - LAT0) * r_ns, np.sin(lng - LNG0) * r_ew * math.cos(LAT0)


def _find(data_dir: Path, candidates: list[str]) -> Path | None:
    return next((data_dir / c for c in candidates if (data_dir / c).is_file()), None)


def _valid_fixes(path: Path, gps: np.ndarray) -> np.ndarray:
    """Rows with a fix (finite lat and lng); a finite value outside the radian range is a malformed file."""
    lat, lng = gps[:, 3], gps[:, 4]
    fix = np.isfinite(lat) & np.isfinite(lng)
    out_of_range = fix & ((np.abs(lat) > math.pi / 2) | (np.abs(lng) > math.pi))
    if np.any(out_of_range):
        i = np.flatnonzero(out_of_range)[0]
        raise ValueError(
            f"{path}: line {i + 1}: lat/lng ({lat[i]}, {lng[i]}) outside [-pi/2, pi/2] x [-pi, pi]: expected radians"
        )
    return gps[fix]


def resample_1hz(gps: np.ndarray, ground_truth: np.ndarray) -> dict[str, np.ndarray]:
    """Valid fixes (rows, 8) and ground truth (rows, 7) -> aligned 1 Hz steps, all float64 with time on axis 0:
    ``utime`` (S,), ``y`` (S, 2) GPS (north, east) metres, ``x`` (S, 4) ground truth [p_1, v_1, p_2, v_2]."""
    gt = ground_truth[np.isfinite(ground_truth[:, 1]) & np.isfinite(ground_truth[:, 2])]
    if gps.shape[0] == 0 or gt.shape[0] < 2:
        return {"utime": np.zeros(0), "y": np.zeros((0, 2)), "x": np.zeros((0, 4))}
    second = np.floor((gps[:, 0] - gps[0, 0]) / 1e6).astype(np.int64)
    first_in_bin = np.concatenate([[True], second[1:] != second[:-1]])  # times are sorted: bins are contiguous
    fixes = gps[first_in_bin]
    utime = fixes[:, 0]
    inside = (utime - 0.5e6 >= gt[0, 0]) & (utime + 0.5e6 <= gt[-1, 0])
    fixes, utime = fixes[inside], utime[inside]
    north, east = gps_to_local(fixes[:, 3], fixes[:, 4])

    def gt_at(u):
        return np.interp(u, gt[:, 0], gt[:, 1]), np.interp(u, gt[:, 0], gt[:, 2])

    p1, p2 = gt_at(utime)
    (p1_before, p2_before), (p1_after, p2_after) = gt_at(utime - 0.5e6), gt_at(utime + 0.5e6)
    x = np.stack([p1, p1_after - p1_before, p2, p2_after - p2_before], axis=-1)  # central difference over 1 s
    return {"utime": utime, "y": np.stack([north, east], axis=-1), "x": x}


def check_session_folder(data_dir, datasets) -> None:
    """ValueError unless ``data_dir`` holds the NCLT session and ``datasets`` include nclt (its only reader)."""
    if "nclt" not in datasets:
        raise ValueError(f"data_dir is read by the nclt data set only, which is not among the datasets "
                         f"({', '.join(datasets)})")
    try:
        session_files(data_dir)
    except NCLTDataMissingError as e:
        raise ValueError(str(e)) from e


def session_files(data_dir, date: str = "2012-01-22", gps_file: str = "gps.csv") -> tuple[Path, Path]:
    """The GPS and ground-truth files of the NCLT session ``date`` under ``data_dir`` (laid out as downloaded, or
    flat); NCLTDataMissingError saying where to get them if ``data_dir`` is not a folder or lacks either."""
    check_choice("gps_file", gps_file, ("gps.csv", "gps_rtk.csv"))
    data_dir = Path(data_dir)
    gps_path = _find(data_dir, [f"{date}/{gps_file}", f"sensor_data/{date}/{gps_file}", gps_file])
    gt_name = f"groundtruth_{date}.csv"
    gt_path = _find(data_dir, [gt_name, f"ground_truth/{gt_name}", f"{date}/{gt_name}"])
    if gps_path is None or gt_path is None:
        where = f"under {data_dir}" if data_dir.is_dir() else f"({data_dir} is not a folder)"
        missing = " and ".join(n for n, p in ((f"{date}/{gps_file}", gps_path), (gt_name, gt_path)) if p is None)
        raise NCLTDataMissingError(
            f"NCLT session {date}: {missing} not found {where}; download sensor_data/{date} "
            f"({gps_file}) and ground_truth/{gt_name} from {NCLT_URL} and pass that folder as the data directory"
        )
    return gps_path, gt_path


def load_nclt(
    data_dir, date: str = "2012-01-22", layout: SplitLayout = NCLT_LAYOUT, gps_file: str = "gps.csv"
) -> Dataset:
    """The NCLT session ``date`` as a ``Dataset`` (see the module docstring for every step).

    Each split: t (B, T) seconds since the first kept fix, y (B, T, 2) GPS (north, east) metres,
    x (B, T, 4) ground truth [p_1, v_1, p_2, v_2] (metres, metres/second); z, events None.
    C (2, 4) picks the positions; R (2, 2) is the training-split covariance of y - C x.
    ``gps_file`` is "gps.csv" (consumer GPS, the paper's noisy observations) or "gps_rtk.csv".
    Raises NCLTDataMissingError (a FileNotFoundError) if the files are missing, ValueError if malformed.
    """
    layout.check()
    gps_path, gt_path = session_files(data_dir, date, gps_file)
    gps = _valid_fixes(gps_path, read_csv(gps_path, GPS_COLUMNS))
    steps = resample_1hz(gps, read_csv(gt_path, GROUND_TRUTH_COLUMNS))
    have, need = steps["utime"].shape[0], layout.total_steps
    if have < need:
        raise ValueError(
            f"NCLT session {date} ({gps_path}, {gt_path}) gives {have} valid 1 Hz steps with ground truth, "
            f"the layout {tuple(layout)} needs {need}"
        )
    dtype = jnp.result_type(float)
    seconds = (steps["utime"] - steps["utime"][0]) / 1e6
    parts = cut_recording(
        layout,
        t=jnp.asarray(seconds, dtype),
        y=jnp.asarray(steps["y"], dtype),
        x=jnp.asarray(steps["x"], dtype),
    )
    splits = [Split(**p) for p in parts]
    n_train = layout.train[0] * layout.train[1]
    residual = steps["y"][:n_train] - steps["x"][:n_train] @ OBSERVATION_MATRIX.T
    R = np.atleast_2d(np.cov(residual, rowvar=False)) if n_train > 1 else np.full((2, 2), np.nan)
    return Dataset(*splits, C=jnp.asarray(OBSERVATION_MATRIX, dtype), R=jnp.asarray(R, dtype))
