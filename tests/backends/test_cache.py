"""The reply cache: stable keys, persistence, concurrent writers, a writer killed mid-write."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

os.environ.setdefault("WANDB_MODE", "disabled")

import pytest
import torch

from nemo_train.backends import ScriptedBackend, user_message
from nemo_train.backends.cache import ResponseCache, cache_key
from nemo_train.backends.messages import to_openai_messages
from nemo_train.errors import UserInputError

REPO = Path(__file__).resolve().parents[2]


def key_of(text="q", image=None, model="m", **params):
    messages = to_openai_messages([user_message(text, [] if image is None else [image])])
    return cache_key(model, messages, {"temperature": 0.0, **params})


def test_keys_depend_on_model_messages_params_and_pixels():
    image = torch.zeros(3, 4, 4)
    base = key_of(image=image)
    assert key_of(image=image.clone()) == base  # equal pixels, equal key
    assert key_of(image=torch.ones(3, 4, 4)) != base
    assert key_of("other", image=image) != base
    assert key_of(image=image, model="m2") != base
    assert key_of(image=image, seed=1) != base
    # parameter order does not matter (canonical JSON)
    assert cache_key("m", [], {"a": 1, "b": 2}) == cache_key("m", [], {"b": 2, "a": 1})


def test_round_trip_and_persistence(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    cache.put("k", ["α reply", "second"], model="m")
    assert cache.get("k") == ["α reply", "second"] and "k" in cache and cache.get("missing") is None
    cache.close()
    assert ResponseCache(tmp_path / "c.sqlite").get("k") == ["α reply", "second"]


def test_folder_paths_get_a_file_inside(tmp_path):
    folder = tmp_path / "llm_cache"  # no suffix: a folder
    cache = ResponseCache(folder)
    assert cache.path == folder / ResponseCache.FILE_NAME and cache.path.exists()
    assert ResponseCache(folder).path == cache.path  # existing folder
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserInputError, match="is a file"):
        ResponseCache(tmp_path / "file" / "c.sqlite")


def test_backend_pays_each_request_once(tmp_path):
    backend = ScriptedBackend(["a", "b", "c"], cache=tmp_path / "cache")
    messages = [user_message("same question", [torch.rand(3, 5, 5)])]
    assert backend.chat(messages) == ["a"]
    assert backend.chat(messages) == ["a"]
    assert backend.chat(messages, temperature=0.5) == ["b"]
    assert len(backend.calls) == 2 and backend.stats.cache_hits == 1


def _write_many(path: str, worker: int, count: int) -> None:
    cache = ResponseCache(path)
    threads = [
        threading.Thread(target=lambda t=t: [cache.put(f"{worker}-{t}-{i}", [f"v{i}"] * 3) for i in range(count)])
        for t in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_concurrent_writer_processes_and_threads(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    ResponseCache(path)
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_write_many, args=(path, w, 40)) for w in range(3)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(60)
    assert [p.exitcode for p in workers] == [0, 0, 0]
    cache = ResponseCache(path)
    assert len(cache) == 3 * 2 * 40
    assert cache.get("2-1-39") == ["v39"] * 3


def _open_together(path: Path, barrier) -> None:
    barrier.wait()
    ResponseCache(path).put("k", ["v"])


@pytest.mark.slow  # several processes, many trials: the full suite's, not the fast lane's
def test_processes_creating_one_cache_at_once_all_open_it(tmp_path):
    """The ranks of a run open the same new cache folder at the same moment: each must get the one file (not a
    file named like the folder), none may see the others' half-made file as damaged and move it aside."""
    context = multiprocessing.get_context("fork")
    for trial in range(30):
        folder = tmp_path / f"run{trial}" / "llm_cache"
        barrier = context.Barrier(3)
        workers = [context.Process(target=_open_together, args=(folder, barrier)) for _ in range(3)]
        for p in workers:
            p.start()
        for p in workers:
            p.join(60)
        assert [p.exitcode for p in workers] == [0, 0, 0], f"trial {trial}"
        assert sorted(p.name for p in folder.parent.iterdir()) == ["llm_cache"]  # no llm_cache.lock beside it
        assert not list(folder.glob("*corrupt*")), f"trial {trial}: a new cache was moved aside as damaged"
        assert ResponseCache(folder).get("k") == ["v"]


def test_a_cache_held_by_another_program_is_waited_for_not_moved_aside(tmp_path):
    path = tmp_path / "held.sqlite"
    ResponseCache(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode=DELETE")
    holder.execute("BEGIN EXCLUSIVE")  # no other connection may read until it ends
    try:
        with pytest.raises(UserInputError, match="stayed locked for 0.2 s"):
            ResponseCache(path, timeout=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert sorted(p.name for p in tmp_path.iterdir() if "corrupt" in p.name) == []
    assert len(ResponseCache(path)) == 0


def test_writer_killed_mid_write_leaves_a_readable_cache(tmp_path):
    path = tmp_path / "killed.sqlite"
    writer = textwrap.dedent(
        f"""
        import sys
        from nemo_train.backends.cache import ResponseCache
        cache = ResponseCache({str(path)!r})
        big = "x" * 200_000
        i = 0
        while True:
            cache.put(f"key-{{i}}", [big, str(i)])
            i += 1
            if i == 5:
                print("ready", flush=True)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", writer], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rows = conn.execute("SELECT key, value FROM replies").fetchall()
    conn.close()
    assert len(rows) >= 5
    for key, value in rows:  # every stored entry is whole
        big, index = json.loads(value)
        assert len(big) == 200_000 and key == f"key-{index}"
    cache = ResponseCache(path)
    cache.put("after", ["ok"])
    assert cache.get("after") == ["ok"]
