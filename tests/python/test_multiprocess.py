"""Multi-process communicators without a GPU: UniqueId, the all-gather callback bridge (exceptions and
wrong sizes become a nonzero return, never a silent success), the three C calls through a stub
library compiled here (struct by value, argument order, a C caller invoking the Python callback), a
library without multi-process support, and the real library reporting a missing GPU."""
import ctypes
import pickle

import pytest

import arfuse
from arfuse import Result, UniqueId
from arfuse._rendezvous import AllGatherBridge
from arfuse._types import UniqueIdStruct
from conftest import run_python
from stub_util import build_multiprocess_stub


# ---- UniqueId -----------------------------------------------------------------------------------------
def _uid_bytes(seed=3):
    return bytes((i * 7 + seed) & 0xFF for i in range(128))


def test_unique_id_round_trips():
    data = _uid_bytes()
    uid = UniqueId(data)
    assert bytes(uid) == uid.to_bytes() == data
    assert len(uid.hex()) == 256
    assert UniqueId.from_hex(uid.hex()) == uid
    assert UniqueId.from_hex("  " + uid.hex().upper() + "\n") == uid  # env vars, copy-paste
    assert UniqueId.from_hex(uid.hex().encode()) == uid
    assert UniqueId(bytearray(data)) == uid == UniqueId(memoryview(data)) == UniqueId(uid)
    assert UniqueId.coerce(uid) is uid
    assert UniqueId.coerce(uid.hex()) == uid and UniqueId.coerce(data) == uid
    assert pickle.loads(pickle.dumps(uid)) == uid  # travels through multiprocessing queues
    assert hash(UniqueId(data)) == hash(uid) and uid != UniqueId(_uid_bytes(4)) and uid != data
    assert repr(uid).startswith("<arfuse.UniqueId ") and uid.hex()[:16] in repr(uid)
    raw = uid._as_struct()
    assert ctypes.sizeof(raw) == 128 and bytes(raw.internal) == data  # NUL bytes included


@pytest.mark.parametrize("value, needle", [
    (b"\x01" * 127, "unique_id has 127 bytes: an arfuse unique id is exactly 128 bytes"),
    (b"\x01" * 256, "unique_id has 256 bytes"),
    (12345, "unique_id: int is not bytes"),
])
def test_unique_id_refuses_wrong_sizes_and_types(value, needle):
    with pytest.raises(arfuse.InvalidArgument) as e:
        UniqueId(value)
    assert needle in e.value.message and e.value.message.startswith("arfuseInvalidArgument: ")


@pytest.mark.parametrize("text, needle", [
    ("ab" * 127, "hex text has 254 characters: expected 256 hex digits"),
    ("zz" * 128, "hex text is not hexadecimal"),
    (None, "from_hex takes a str of 256 hex digits, got NoneType"),
])
def test_unique_id_refuses_bad_hex(text, needle):
    with pytest.raises(arfuse.InvalidArgument, match=needle):
        UniqueId.from_hex(text)


# ---- the all-gather bridge, called as the library calls it ----------------------------------------------
def _call(bridge, mine: bytes, nranks: int):
    """Calls bridge.c_fn through its C function pointer, as the library does; returns (rc, all bytes)."""
    src = ctypes.create_string_buffer(mine, max(len(mine), 1))
    dst = ctypes.create_string_buffer(nranks * len(mine) or 1)
    addr = ctypes.cast(bridge.c_fn, ctypes.c_void_p).value
    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)(addr)
    rc = fn(None, ctypes.addressof(src), ctypes.addressof(dst), len(mine))
    return rc, dst.raw[:nranks * len(mine)]


def test_bridge_concatenates_bytes_or_parts():
    mine = b"\x00rank_1\x00"
    others = [b"R0" * 4, mine, b"R2" * 4]
    seen = []

    def gather_bytes(m):
        seen.append(m)
        return b"".join(others)

    b = AllGatherBridge(gather_bytes, 3, 1)
    assert _call(b, mine, 3) == (0, b"".join(others))
    assert seen == [mine] and b.calls == 1 and b.error is None  # the callable sees exactly this rank's bytes
    b = AllGatherBridge(lambda m: [bytearray(others[0]), m, memoryview(others[2])], 3, 1)
    assert _call(b, mine, 3) == (0, b"".join(others))
    assert _call(AllGatherBridge(lambda m: m, 1, 0), b"", 1) == (0, b"")  # zero bytes is legal


@pytest.mark.parametrize("fn, error, needle", [
    (lambda m: m * 2, ValueError, "returned 16 bytes; expected nranks x 8 = 24"),
    (lambda m: [m, m], ValueError, "returned 2 parts; expected one per rank (3)"),
    (lambda m: [m, m, m[:3]], ValueError, "part 2 has 3 bytes; every rank sent 8"),
    (lambda m: [m, m, "text"], TypeError, "part 2 is str, not bytes"),
    (lambda m: None, TypeError, "returned NoneType: return bytes"),
    (lambda m: b"\xff" * 24, ValueError, "does not hold this rank's bytes at offset rank x 8 = 8"),
    (lambda m: 1 / 0, ZeroDivisionError, "division by zero"),
])
def test_bridge_turns_every_failure_into_a_nonzero_return(fn, error, needle, capsys):
    b = AllGatherBridge(fn, 3, 1)
    rc, _ = _call(b, b"12345678", 3)
    assert rc != 0
    assert isinstance(b.error, error) and needle in str(b.error)
    assert "Exception ignored" not in capsys.readouterr().err  # ctypes never saw an exception


def test_bridge_keeps_the_first_error_and_catches_keyboard_interrupt():
    def interrupted(m):
        raise KeyboardInterrupt

    b = AllGatherBridge(interrupted, 2, 0)
    assert _call(b, b"x" * 8, 2)[0] != 0 and isinstance(b.error, KeyboardInterrupt)
    b.fn = lambda m: 1 / 0
    assert _call(b, b"x" * 8, 2)[0] != 0 and isinstance(b.error, KeyboardInterrupt) and b.calls == 2


def test_bridge_refuses_a_non_callable():
    with pytest.raises(arfuse.InvalidArgument, match="all_gather: bytes is not callable"):
        AllGatherBridge(b"not a function", 2, 0)


# ---- the C calls, through a stub library (stub_util.py) -------------------------------------------------
@pytest.fixture(scope="module")
def stub_lib(tmp_path_factory):
    return build_multiprocess_stub(tmp_path_factory.mktemp("stubmp"))


def _in_stub(stub_lib, code):
    r = run_python(code, env_update={"ARFUSE_LIBRARY_PATH": stub_lib}, drop=("ARFUSE_LIBRARY",))
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_init_rank_passes_the_id_by_value_and_every_argument(stub_lib):
    out = _in_stub(stub_lib, """
        import arfuse
        uid = arfuse.get_unique_id()
        print("UID", uid.hex()[:8], len(bytes(uid)))
        for id_form in (uid, bytes(uid), uid.hex()):
            with arfuse.Communicator.init_rank(3, id_form, 2, 5, max_tokens=64) as c:
                print("HANDLE", hex(c.handle))
        print("DESTROYED", c.destroyed)
        try:
            arfuse.Communicator.init_rank(3, arfuse.UniqueId(b"\\0" * 128), 2, 5, max_tokens=64)
        except arfuse.InvalidArgument as e:
            print("ERR", e)
        try:
            arfuse.Communicator.init_rank(3, uid, 2, 5, config=arfuse.make_config(), max_tokens=64)
        except arfuse.InvalidArgument as e:
            print("ERR2", e)
    """)
    assert "UID 030a1118 128" in out  # bytes i*7+3 from the C side
    assert out.count("HANDLE 0x1002") == 3 and "DESTROYED True" in out
    assert "ERR arfuseInvalidArgument: arfuseCommInitRank: uniqueId: not the stub's id" in out
    assert "ERR2 arfuseInvalidArgument: pass either config= or the keyword fields, not both" in out


def test_init_rank_with_all_gather_calls_the_python_callable(stub_lib):
    out = _in_stub(stub_lib, """
        import arfuse
        calls = []
        def gather(mine):  # a 2-rank group: rank 0 is this process, rank 1's bytes are made up
            calls.append(len(mine))
            other = bytes([mine[0] + 1]) * len(mine)
            return [mine, other]
        c = arfuse.Communicator.init_rank_with_all_gather(2, 0, 0, gather)
        print("OK", hex(c.handle), calls)
        c.destroy()
    """)
    assert "OK 0x2000 [40, 40]" in out


def test_a_failing_callable_fails_the_init_with_both_errors(stub_lib):
    out = _in_stub(stub_lib, """
        import arfuse
        def broken(mine):
            raise ConnectionError("peer 1 vanished")
        try:
            arfuse.Communicator.init_rank_with_all_gather(2, 0, 0, broken)
        except arfuse.SystemFailure as e:
            print("ERR", e)
            print("CAUSE", type(e.__cause__).__name__, e.__cause__)
        def short(mine):
            return mine  # one rank's bytes for a 2-rank group
        try:
            arfuse.Communicator.init_rank_with_all_gather(2, 0, 0, short)
        except arfuse.ArfuseError as e:
            print("ERR2", type(e).__name__, e)
        def wrong_order(mine):
            return [bytes([mine[0] + 1]) * len(mine), mine]
        try:
            arfuse.Communicator.init_rank_with_all_gather(2, 0, 0, wrong_order)
        except arfuse.ArfuseError as e:
            print("ERR3", type(e).__name__, e)
    """)
    assert ("ERR arfuseSystemError: rank 0: the all-gather callback failed (returned 1) (the Python all_gather "
            "raised ConnectionError: peer 1 vanished)") in out
    assert "CAUSE ConnectionError peer 1 vanished" in out
    assert "ERR2 SystemFailure" in out and "returned 40 bytes; expected nranks x 40 = 80" in out
    assert "ERR3 SystemFailure" in out and "does not hold this rank's bytes at offset rank x 40 = 0" in out


def test_keyboard_interrupt_in_the_callable_is_raised_as_is(stub_lib):
    out = _in_stub(stub_lib, """
        import arfuse
        def interrupted(mine):
            raise KeyboardInterrupt
        try:
            arfuse.Communicator.init_rank_with_all_gather(2, 0, 0, interrupted)
        except KeyboardInterrupt:
            print("INTERRUPTED")
    """)
    assert "INTERRUPTED" in out


def test_library_without_multi_process_support_still_loads(tmp_path):
    from test_loading import _stub_library

    from arfuse import _lib

    path = _stub_library(tmp_path, 100, skip=set(_lib.LAZY))
    lib = _lib.open_library(path)  # loads: everything else is served
    assert not lib.has("arfuseCommInitRank") and lib.has("arfuseCommInitAll")
    for name, feature in _lib.LAZY.items():
        with pytest.raises(arfuse.ArfuseLibraryError) as e:
            getattr(lib, name)
        msg = str(e.value)
        assert f"{path} (found via an explicit path) has no symbol {name}" in msg
        assert f"built before {feature} existed" in msg and "ARFUSE_LIBRARY_PATH" in msg
    r = run_python("""
        import arfuse
        for call in (lambda: arfuse.get_unique_id(),
                     lambda: arfuse.Communicator.init_rank(2, b"\\1" * 128, 0, 0),
                     lambda: arfuse.Communicator.init_rank_with_all_gather(2, 0, 0, lambda m: m)):
            try:
                call()
            except arfuse.ArfuseLibraryError as e:
                print("ERR", str(e).split(": this")[0].rsplit(" ", 1)[-1])
        print("BUILD", arfuse.library_version())
    """, env_update={"ARFUSE_LIBRARY_PATH": path}, drop=("ARFUSE_LIBRARY",))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[:3] == ["ERR arfuseGetUniqueId", "ERR arfuseCommInitRank",
                                         "ERR arfuseCommInitRankWithAllGather"]
    assert "BUILD 0.1.0" in r.stdout


# ---- the real library --------------------------------------------------------------------------------------
def _multi_process_built(lib):
    if not all(lib.has(n) for n in arfuse._lib.MULTI_PROCESS):
        pytest.skip(f"{lib.path} has no multi-process functions yet (arfuseCommInitRank): built before issue 6's "
                    f"native part")


def _gpu_visible() -> bool:
    try:
        arfuse.Communicator.init_all([0], max_tokens=1, max_hidden=8)[0].destroy()
        return True
    except arfuse.NoDevice:
        return False


def test_real_library_exports_the_multi_process_calls_or_says_why(lib):
    if all(lib.has(n) for n in arfuse._lib.MULTI_PROCESS):
        assert lib.arfuseCommInitRank.argtypes[2] is UniqueIdStruct
        return
    with pytest.raises(arfuse.ArfuseLibraryError, match="built before multi-process communicators existed"):
        arfuse.Communicator.init_rank(1, b"\1" * 128, 0, 0)


def test_missing_gpu_is_reported_by_init_rank(lib):
    _multi_process_built(lib)
    if _gpu_visible():
        pytest.skip("a GPU is visible: the no-device path is tested on CPU-only machines")
    uid = arfuse.get_unique_id()  # the rendezvous needs no GPU
    assert len(bytes(uid)) == 128 and bytes(uid) != b"\0" * 128
    with pytest.raises((arfuse.NoDevice, arfuse.CudaError)) as e:
        arfuse.Communicator.init_rank(1, uid, 0, 0, timeout_ms=5000)
    assert e.value.message.startswith(e.value.name + ": ")
    assert e.value.code in (Result.NoDevice, Result.CudaError)


def test_missing_gpu_is_reported_by_init_rank_with_all_gather(lib):
    _multi_process_built(lib)
    if _gpu_visible():
        pytest.skip("a GPU is visible: the no-device path is tested on CPU-only machines")
    with pytest.raises((arfuse.NoDevice, arfuse.CudaError)) as e:
        arfuse.Communicator.init_rank_with_all_gather(1, 0, 0, lambda mine: mine, timeout_ms=5000)
    assert e.value.code in (Result.NoDevice, Result.CudaError)


def test_real_library_fails_the_init_when_the_python_all_gather_fails(lib, capfd):
    _multi_process_built(lib)

    def broken(mine):
        raise ConnectionError("peer 1 vanished")

    with pytest.raises(arfuse.SystemFailure) as e:
        arfuse.Communicator.init_rank_with_all_gather(2, 0, 0, broken, timeout_ms=3000)
    assert e.value.message.startswith("arfuseSystemError: arfuseCommInitRankWithAllGather (rank 0 of 2): ")
    assert "the all-gather callback failed (returned 1)" in e.value.message
    assert e.value.message.endswith("(the Python all_gather raised ConnectionError: peer 1 vanished)")
    assert isinstance(e.value.__cause__, ConnectionError)
    with pytest.raises(arfuse.SystemFailure, match=r"the Python all_gather raised ValueError: the all_gather "
                                                   r"callable returned \d+ bytes; expected nranks x"):
        arfuse.Communicator.init_rank_with_all_gather(2, 0, 0, lambda mine: mine, timeout_ms=3000)
    assert "Exception ignored" not in capfd.readouterr().err


def test_real_library_refuses_bad_arguments_before_any_rendezvous(lib):
    _multi_process_built(lib)
    with pytest.raises(arfuse.InvalidArgument, match="rank"):
        arfuse.Communicator.init_rank_with_all_gather(2, 2, 0, lambda mine: mine * 2, timeout_ms=2000)
    with pytest.raises(arfuse.InvalidArgument, match="nranks"):
        arfuse.Communicator.init_rank_with_all_gather(0, 0, 0, lambda mine: b"", timeout_ms=2000)
    with pytest.raises(arfuse.InvalidArgument):  # an id that was never filled in
        arfuse.Communicator.init_rank(2, b"\0" * 128, 1, 0, timeout_ms=2000)


# ---- the multi-process harness itself: a failing or hanging rank never hangs a test --------------------
def _harness_worker(world, mode):
    import time

    if world.rank == 1 and mode == "raise":
        raise RuntimeError("rank 1 gives up")
    if world.rank == 1 and mode == "hang":
        time.sleep(3600)
    if world.rank == 1 and mode == "die":
        import os

        os._exit(7)
    return world.share_from_rank0("id-from-rank-0" if world.rank == 0 else None)


def test_harness_collects_results_and_stops_failing_or_hanging_ranks():
    import time

    from mp_util import run_ranks

    assert run_ranks(_harness_worker, 3, ("ok",), timeout=60) == ["id-from-rank-0"] * 3
    for mode, needle in (("raise", "RuntimeError: rank 1 gives up"), ("hang", "did not finish within 4 s (killed)"),
                         ("die", "rank 1 exited with code 7 without reporting")):
        start = time.monotonic()
        with pytest.raises(AssertionError) as e:
            run_ranks(_harness_worker, 2, (mode,), timeout=4 if mode == "hang" else 60)
        assert needle in str(e.value), str(e.value)
        assert time.monotonic() - start < 20, mode


def test_run_command_kills_what_the_command_started(tmp_path):
    import time

    from mp_util import run_command

    pidfile = tmp_path / "child.pid"
    start = time.monotonic()
    with pytest.raises(AssertionError, match="did not finish within 1 s"):
        run_command(["sh", "-c", f"sleep 300 & echo $! > {pidfile}; wait"], timeout=1)
    assert time.monotonic() - start < 15
    child = int(pidfile.read_text())

    def running(pid):  # a killed process nobody has reaped yet is a zombie ("Z"): not running
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    for _ in range(50):  # the command's own child is gone too
        if not running(child):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the command's child {child} survived")
    assert run_command(["sh", "-c", "echo hi"], timeout=30).stdout == "hi\n"


def test_rank_arguments_are_checked_before_the_rendezvous_or_the_all_gather(lib):
    # Issue 16: arfuseCommInitRank* never checked nranks <= 16, and fixed arrays of 16 are indexed by
    # rank. Python checks first (the same sentence as the C ABI), so neither a rendezvous nor the
    # caller's all-gather ever sees a bad rank.
    _multi_process_built(lib)
    calls = []

    def gather(mine):
        calls.append(mine)
        return mine

    for nranks, rank, needle in ((17, 0, "nranks=17: must be 1..16"), (0, 0, "nranks=0: must be 1..16"),
                                 (4, 4, "rank=4: must be 0..3 for nranks=4"), (4, -1, "rank=-1: must be 0..3")):
        with pytest.raises(arfuse.InvalidArgument, match=needle):
            arfuse.Communicator.init_rank(nranks, b"\1" * 128, rank, 0)
        with pytest.raises(arfuse.InvalidArgument, match=needle):
            arfuse.Communicator.init_rank_with_all_gather(nranks, rank, 0, gather)
    assert calls == []
