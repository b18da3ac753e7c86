"""Test helper: start a command line (``nemo-train <command> ...``, ``python -m nemo_train.cli ...``,
``python <script> ...`` or ``python -c <code>``) in a process of its own forked from the fork server of
``tests/forked_ranks.py``, which has imported torch, Lightning and the commands' modules once, instead of in a fresh
interpreter that imports them again: most of a small command's time on a small machine.

The process is the command's as ``subprocess`` would start it: a session (process group) of its own, the given
working folder, environment, ``sys.argv``, ``sys.path`` (a fresh interpreter's: the script's folder or the working
folder, then ``PYTHONPATH``, then the interpreter's own), standard output and error, exit status (``-9`` when
SIGKILLed), ``atexit`` handlers run at the end; ``tests/hold/sitecustomize.py`` installed when the environment asks
for it (``distributed_runs.holding``), as the interpreter would import it from ``PYTHONPATH``. A command that
starts more processes (``--devices 2``: Lightning re-runs the same command line once per extra process) starts
them as it always does, as children of this process and in its process group, each a fresh interpreter."""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from forked_ranks import PRELOAD

HOLD = Path(__file__).resolve().parent / "hold"


@functools.cache
def _interpreter_path() -> tuple[str, ...]:
    """``sys.path`` of a fresh interpreter without ``PYTHONPATH``, less its first entry (the script's folder)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import json, sys; print(json.dumps(sys.path[1:]))"
    return tuple(json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True).stdout))


def _command_line(argv: list[str], cwd: str) -> tuple[list[str], str, str | None]:
    """``(sys.argv, sys.path[0], the module run with -m)`` of a fresh interpreter started with ``argv``."""
    if Path(argv[0]).name.startswith("python"):
        if argv[1] == "-m":
            import importlib.util

            origin = importlib.util.find_spec(argv[2]).origin
            return [origin, *argv[3:]], cwd, argv[2]
        if argv[1] == "-c":
            return ["-c", *argv[3:]], "", None
        script = os.path.abspath(os.path.join(cwd, argv[1]))
        return [script, *argv[2:]], os.path.dirname(os.path.realpath(script)), None
    script = os.path.abspath(os.path.join(cwd, argv[0]))
    return [script, *argv[1:]], os.path.dirname(os.path.realpath(script)), None


def _run(argv: list[str], env: dict[str, str], cwd: str, stdout: str, stderr: str, base: tuple[str, ...]) -> None:
    """The forked process: a session of its own, its output and errors in ``stdout`` and ``stderr``, a fresh
    interpreter's main process; then it becomes the command's process (:func:`_become`)."""
    from multiprocessing import context, process

    os.setsid()
    # a fresh interpreter's main process, whose default start method is the platform's (not the fork server)
    me = process.current_process()
    me._name, me._identity, me._parent_pid, process._parent_process = "MainProcess", (), None, None
    context._default_context._actual_context = None
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, path in ((1, stdout), (2, stderr)):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(opened, fd)
        os.close(opened)
    _fork_rank_zygote(base)
    _become(argv, env, cwd, base)


def _fork_rank_zygote(base: tuple[str, ...]) -> None:
    """Fork, before the command runs, a copy of this process that waits: when the command re-runs its own command
    line in a child process (Lightning's launcher: ``subprocess.Popen([python, script or -m module, *args])`` for
    each extra rank), that copy becomes the child, pre-imported, instead of a fresh interpreter; a child of this
    process and in its process group as the launcher's would be. Unasked (a one-process run, this process
    killed), it ends."""
    import pickle
    import subprocess

    read, write = os.pipe()
    zygote = os.fork()
    if zygote == 0:
        os.close(write)
        with os.fdopen(read, "rb") as requests:
            request = requests.read()
        if not request:
            os._exit(0)
        argv, env, cwd = pickle.loads(request)
        _become(argv, env, cwd, base)
    os.close(read)
    os.set_inheritable(write, False)
    real = subprocess.Popen._execute_child

    def execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, *rest):
        nonlocal write
        rerun = [os.path.abspath(sys.argv[0]), *sys.argv[1:]]
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        if spec is not None:
            rerun = ["-m", spec.name, *sys.argv[1:]]
        streams = rest[3:9]  # p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite: -1 when inherited
        if write is None or list(args) != [sys.executable, *rerun] or any(fd != -1 for fd in streams):
            return real(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, *rest)
        with os.fdopen(write, "wb") as requests:
            requests.write(pickle.dumps((list(args), dict(os.environ if env is None else env), cwd or os.getcwd())))
        write = None
        self.pid, self._child_created = zygote, True

    subprocess.Popen._execute_child = execute_child


def _become(argv: list[str], env: dict[str, str], cwd: str, base: tuple[str, ...]) -> None:
    """Become the process of ``argv`` started in ``cwd`` with ``env`` and run it; never returns."""
    import atexit
    import runpy
    import threading
    import traceback

    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv, first, module = _command_line(argv, cwd)
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *extra, *base]
    import __main__

    __main__.__spec__ = None
    code = 0
    try:
        if "OMP_NUM_THREADS" in env:
            import torch

            torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        if env.get("NEMO_TEST_HOLD_AFTER") and str(HOLD) in extra:
            runpy.run_path(str(HOLD / "sitecustomize.py"), run_name="sitecustomize")
        if argv[1:2] == ["-c"]:
            exec(compile(argv[2], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        elif Path(argv[0]).name.startswith("python") and module is None:
            runpy.run_path(sys.argv[0], run_name="__main__")
        else:
            if module is not None:
                import importlib.util

                __main__.__spec__ = importlib.util.find_spec(module)  # Lightning re-runs ``python -m module``
            from nemo_train.cli import main

            main(sys.argv[1:])
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
        if not isinstance(exit.code, int | None):
            print(exit.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        threading._shutdown()  # as the interpreter ends: wait for non-daemon threads, run the atexit handlers
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


class Forked:
    """A started command, as ``subprocess.Popen`` gives it (``pid``, ``poll``, ``wait``, ``returncode``)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | Path, stdout: str, stderr: str) -> None:
        multiprocessing.set_forkserver_preload(PRELOAD)
        context = multiprocessing.get_context("forkserver")
        args = ([str(a) for a in argv], dict(env), str(cwd), stdout, stderr, _interpreter_path())
        self._process = context.Process(target=_run, args=args, daemon=False)
        self._process.start()
        self.pid = self._process.pid
        while self.poll() is None and _group(self.pid) != self.pid:  # in its own session on return, as with Popen
            time.sleep(0.001)

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def send_signal(self, signal: int) -> None:
        os.kill(self.pid, signal)

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(str(self._process), timeout)
        return self._process.exitcode


def start(
    argv: list[str], env: dict[str, str], cwd: str | Path, stdout: Path | None = None, stderr: Path | None = None
) -> Forked:
    """``subprocess.Popen(argv, env=env, cwd=cwd, start_new_session=True)`` with its output and errors written to
    the files ``stdout`` and ``stderr`` (``None``: discarded), forked."""
    return Forked(argv, env, cwd, str(stdout or os.devnull), str(stderr or os.devnull))


def run(argv: list[str], env: dict[str, str], cwd: str | Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)``, forked; a run
    past ``timeout`` is killed (its whole process group) and raises ``subprocess.TimeoutExpired``."""
    import signal

    with tempfile.TemporaryDirectory(prefix="nemo-train-tests-forked-") as folder:
        stdout, stderr = Path(folder) / "stdout", Path(folder) / "stderr"
        stdout.touch(), stderr.touch()
        proc = start(argv, env, cwd, stdout, stderr)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        printed = [path.read_text(errors="replace") for path in (stdout, stderr)]
    return subprocess.CompletedProcess(argv, proc.returncode, *printed)
