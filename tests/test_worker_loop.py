"""The worker's loop over a child's pipes: a pipe at its end leaves the descriptors it waits on (else select finds
it readable at every call and the loop spins while the child runs on), and a child's end is seen by its pidfd."""

import os
import time

from grader.worker.__main__ import _pidfd, drain, drain_results, wait_readable


def test_a_pipe_at_its_end_is_watched_no_more():
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    watched = [read_end]
    tail = bytearray()
    os.write(write_end, b"said")
    assert drain(read_end, tail, watched) == 4 and watched == [read_end]   # open: still watched
    os.close(write_end)
    assert drain(read_end, tail, watched) == 0 and watched == []
    assert bytes(tail) == b"said"
    os.close(read_end)


def test_a_result_pipe_at_its_end_is_watched_no_more():
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    watched = [read_end]
    os.close(write_end)
    assert drain_results(read_end, None, watched=watched) is False   # nothing came: `results` is never fed
    assert watched == []
    os.close(read_end)


def test_a_childs_end_wakes_the_wait_before_its_tick():
    pid = os.fork()
    if pid == 0:
        time.sleep(0.2)
        os._exit(0)
    ended = _pidfd(pid)
    assert ended is not None
    try:
        started = time.monotonic()
        wait_readable([ended], 30.0)
        waited = time.monotonic() - started
        assert os.waitpid(pid, os.WNOHANG)[0] == pid   # it had ended when the wait returned
        assert waited < 10.0
    finally:
        os.close(ended)


def test_nothing_to_watch_still_waits_its_time():
    started = time.monotonic()
    wait_readable([], 0.1)
    assert time.monotonic() - started >= 0.09
