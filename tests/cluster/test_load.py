"""The autoscaler's windowed average load: the running-integral form against a direct scan of
the (time, count) stamps in the artifact's ``get_avg_load`` manner."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidal.cluster.load import ModelLoad


def scan_avg(stamps: list[tuple[int, int]], now: int, window: int) -> float:
    """Reference: the last stamp at or before the window start (else count 0 from the start),
    then every later stamp, integrated to now, over the window length."""
    start = now - window
    if not stamps:
        return 0.0
    if len(stamps) == 1:
        t, load = stamps[0]
        return float(load) if t < start else load * (now - t) / window
    before = [s for s in stamps if s[0] <= start]
    after = [s for s in stamps if s[0] > start]
    if not after:
        return float(before[-1][1])
    last_t, last_load = before[-1] if before else (start, 0)
    total = 0
    for t, load in after:
        total += last_load * (t - last_t)
        last_t, last_load = t, load
    return (total + last_load * (now - last_t)) / window


@given(
    events=st.lists(
        st.tuples(st.integers(0, 3_000), st.sampled_from([1, 1, -1, 0, 2])), max_size=80
    ),
    window=st.integers(1, 5_000),
)
def test_avg_load_equals_a_scan_of_the_stamps(events, window):
    load = ModelLoad()
    stamps: list[tuple[int, int]] = []
    now = 0
    inflight = 0
    for dt, kind in events:
        now += dt
        if kind == 0:
            assert load.avg_load(now, window) == scan_avg(stamps, now, window)
        elif kind == 2:
            load.close_window(now, window)
        else:
            if inflight + kind < 0:
                continue
            inflight += kind
            load.change(now, kind)
            stamps.append((now, inflight))
    assert load.avg_load(now + 1, window) == scan_avg(stamps, now + 1, window)
