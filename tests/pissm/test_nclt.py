"""NCLT loader on small session files the tests write in the exact NCLT format (header-less CSV, utime in
microseconds; gps: utime, mode, num_sats, lat, lng (radians), alt, track, speed; ground truth: utime, x, y, z,
roll, pitch, yaw). The robot drives a known smooth path in the (north, east) ground-truth frame; the GPS fixes are
that path mapped to lat/lng, with seconds of no fix (NaN rows) as in the real files.

The metric frame is checked against great-circle (haversine) distances, an independent formula."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from memlab.pissm.data.nclt import LAT0, LNG0, NCLT_LAYOUT, NCLT_URL, NCLTDataMissingError, gps_to_local, load_nclt
from memlab.pissm.data.splits import SplitLayout

DATE = "2012-01-22"
T0 = 1327249200_000000  # utime (microseconds) of the session start
SMALL = SplitLayout(train=(3, 20), validation=(1, 20), test=(1, 30))  # 110 steps
NO_FIX_SECONDS = (7, 8, 50)


def path(seconds):
    """Ground-truth (north, east) metres and their time derivative."""
    s = np.asarray(seconds, np.float64)
    north = 120.0 + 40.0 * np.sin(0.05 * s)
    east = -300.0 + 1.5 * s
    return north, east, 2.0 * np.cos(0.05 * s), np.full_like(s, 1.5)


def to_latlng(north, east):
    """Inverse of the development-kit linearisation (gps_to_local is its forward map)."""
    n1, _ = gps_to_local(LAT0 + 1e-6, LNG0)
    _, e1 = gps_to_local(LAT0, LNG0 + 1e-6)
    r_ns, r_ew_cos = n1 / math.sin(1e-6), e1 / math.sin(1e-6)
    return LAT0 + np.arcsin(north / r_ns), LNG0 + np.arcsin(east / r_ew_cos)


def write_session(folder: Path, duration: int, gps_noise: float = 0.0, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    t_gt = np.arange(-2.0, duration + 2.0, 0.01)  # 100 Hz ground truth covering the GPS
    north, east, _, _ = path(t_gt)
    gt = np.column_stack([T0 + np.round(t_gt * 1e6), north, east, np.zeros((t_gt.size, 4))])
    lines = [f"{int(r[0])},{r[1]:.6f},{r[2]:.6f},0.0,0.01,-0.02,1.5" for r in gt]
    (folder / f"groundtruth_{DATE}.csv").write_text("\n".join(lines) + "\n")
    t_gps = np.arange(0.0, duration, 0.2)  # 5 Hz fixes, first of each second at the whole second
    north, east, _, _ = path(t_gps)
    noise = gps_noise * rng.normal(size=(2, t_gps.size))
    lat, lng = to_latlng(north + noise[0], east + noise[1])
    lines = []
    for k, s in enumerate(t_gps):
        utime = T0 + round(s * 1e6)
        if int(s) in NO_FIX_SECONDS:
            lines.append(f"{utime},1,0,nan,nan,nan,nan,nan")
        else:
            lines.append(f"{utime},3,9,{lat[k]:.12f},{lng[k]:.12f},270.0,1.2,1.5")
    (folder / "gps.csv").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nclt")
    write_session(folder, duration=130)
    return folder, load_nclt(folder, DATE, SMALL)


def test_well_formed_files_give_the_layout(small):
    _, d = small
    for split, (n, length) in zip(d[:3], SMALL):
        assert split.y.shape == (n, length, 2) and split.x.shape == (n, length, 4) and split.t.shape == (n, length)
        assert split.z is None and split.events is None
    assert d.C.shape == (2, 4) and d.R.shape == (2, 2)


def test_steps_are_1hz_and_no_fix_seconds_are_dropped(small):
    _, d = small
    t = np.concatenate([np.asarray(s.t, np.float64).ravel() for s in d[:3]])
    assert t[0] == 0.0
    gaps = np.diff(t)
    np.testing.assert_allclose(np.sort(np.unique(np.round(gaps, 3))), [1.0, 2.0, 3.0])
    kept = set(np.round(t).astype(int))
    assert not kept & set(NO_FIX_SECONDS)
    assert kept == set(range(t.size + 3)) - set(NO_FIX_SECONDS)  # every other second, in order


def test_gps_lands_on_ground_truth_in_metres(small):
    _, d = small
    for split in d[:3]:
        t, y, x = (np.asarray(a, np.float64) for a in (split.t, split.y, split.x))
        north, east, v_north, v_east = path(t)
        np.testing.assert_allclose(x[..., 0], north, atol=1e-3)
        np.testing.assert_allclose(x[..., 2], east, atol=1e-3)
        np.testing.assert_allclose(x[..., 1], v_north, atol=5e-3)  # central difference over 1 s
        np.testing.assert_allclose(x[..., 3], v_east, atol=1e-3)
        np.testing.assert_allclose(y, x[..., [0, 2]], atol=1e-3)  # noiseless GPS: y = C x
        np.testing.assert_allclose(y, np.einsum("ij,btj->bti", np.asarray(d.C), x), atol=1e-3)


def test_metric_frame_matches_great_circle_distances():
    lat = LAT0 + np.array([0.0, 2e-5, -3e-5, 1e-5])
    lng = LNG0 + np.array([0.0, 1e-5, 4e-5, -2e-5])
    north, east = gps_to_local(lat, lng)
    for i in range(1, 4):
        dlat, dlng = lat[i] - lat[0], lng[i] - lng[0]
        a = math.sin(dlat / 2) ** 2 + math.cos(lat[0]) * math.cos(lat[i]) * math.sin(dlng / 2) ** 2
        great_circle = 2 * 6371000.0 * math.asin(math.sqrt(a))  # haversine, spherical Earth
        assert abs(math.hypot(north[i] - north[0], east[i] - east[0]) / great_circle - 1) < 5e-3
    assert np.all(np.sign(north[1:]) == np.sign(lat[1:] - LAT0))  # x points north
    assert np.all(np.sign(east[1:]) == np.sign(lng[1:] - LNG0))  # y points east


def test_paper_split_and_noise_estimate(tmp_path):
    sensors, truth = tmp_path / "sensor_data" / DATE, tmp_path / "ground_truth"  # the NCLT download layout
    write_session(sensors, duration=4300, gps_noise=3.0)
    truth.mkdir()
    (sensors / f"groundtruth_{DATE}.csv").rename(truth / f"groundtruth_{DATE}.csv")
    d = load_nclt(tmp_path)  # 4297 valid seconds; the first 4280 are used
    assert NCLT_LAYOUT == ((18, 200), (2, 200), (1, 280))
    assert d.train.y.shape == (18, 200, 2) and d.validation.y.shape == (2, 200, 2) and d.test.y.shape == (1, 280, 2)
    t = np.concatenate([np.asarray(s.t, np.float64).ravel() for s in d[:3]])
    assert np.all(np.diff(t) > 0)  # time order, no step in two splits
    np.testing.assert_allclose(np.diag(np.asarray(d.R)), 9.0, rtol=0.15)  # 3600 training residuals
    assert abs(float(d.R[0, 1])) < 1.0


def test_too_few_steps_for_the_layout(small):
    folder, _ = small
    with pytest.raises(ValueError, match="needs 4280"):
        load_nclt(folder, DATE)


def test_missing_files_say_in_one_line_where_to_get_them(tmp_path):
    with pytest.raises(NCLTDataMissingError) as info:
        load_nclt(tmp_path, DATE, SMALL)
    assert isinstance(info.value, FileNotFoundError)
    message = str(info.value)
    assert "\n" not in message and NCLT_URL in message and DATE in message


def _corrupt(folder: Path, name: str, line: int, new: str | None) -> Path:
    file = folder / name
    lines = file.read_text().splitlines()
    if new is None:
        lines.insert(line - 1, "")
    else:
        lines[line - 1] = new(lines[line - 1])
    file.write_text("\n".join(lines) + "\n")
    return file


def _drop_last_column(s):
    return s.rsplit(",", 1)[0]


def _text_in_x(s):
    f = s.split(",")
    return ",".join([f[0], "north", *f[2:]])


def _back_in_time(s):
    f = s.split(",")
    return ",".join([str(int(f[0]) - 10_000_000), *f[1:]])


def _degrees(s):
    f = s.split(",")
    return ",".join([*f[:3], "42.29", "-83.71", *f[5:]])


def _nan_time(s):
    return ",".join(["nan", *s.split(",")[1:]])


@pytest.mark.parametrize(
    "name, line, corrupt, reason",
    [
        ("gps.csv", 7, _drop_last_column, "expected 8 comma-separated columns"),
        (f"groundtruth_{DATE}.csv", 12, _text_in_x, "column x is not a number"),
        ("gps.csv", 20, _back_in_time, "time goes backwards"),
        ("gps.csv", 5, _degrees, "expected radians"),
        ("gps.csv", 9, None, "empty line"),
        (f"groundtruth_{DATE}.csv", 3, _nan_time, "expected a finite number"),
    ],
)
def test_malformed_files_name_file_line_and_reason(tmp_path, name, line, corrupt, reason):
    write_session(tmp_path, duration=130)
    file = _corrupt(tmp_path, name, line, corrupt)
    with pytest.raises(ValueError, match=f"line {line}: .*{reason}") as info:
        load_nclt(tmp_path, DATE, SMALL)
    assert str(file) in str(info.value)


def test_wrong_gps_file_name_is_rejected(small):
    folder, _ = small
    with pytest.raises(ValueError, match="gps_file"):
        load_nclt(folder, DATE, SMALL, gps_file="gps.txt")
