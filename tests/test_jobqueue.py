"""The queue of long jobs (``scripts/jobqueue.py``): the committed file loads, a bad one is one line, and
``run`` gives a job its ``env`` and keeps its end in ``state.json``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import jobqueue


def _clean_checkout(tmp_path: Path) -> Path:
    """A git checkout with one committed file and nothing else: what ``run`` accepts."""
    wt = tmp_path / "wt"
    wt.mkdir()
    subprocess.run(["git", "init", "-q", str(wt)], check=True)
    (wt / "f").write_text("x")
    git = ["git", "-C", str(wt), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    return wt


def test_the_committed_queue_loads_and_states_its_minutes():
    data = jobqueue.load()
    lines = jobqueue.status(data)
    assert lines[-1].startswith("left: about ") and len(lines) == len(data["job"]) + 2


def test_a_job_env_that_is_not_a_table_of_strings_is_one_line(tmp_path):
    bad = tmp_path / "q.toml"
    bad.write_text('[[job]]\nid = "a"\ncmd = ["true"]\nminutes = 1\nstate = "pending"\nenv = { N = 3 }\n')
    with pytest.raises(SystemExit, match=r"job 1: 'env' must be a table of strings") as err:
        jobqueue.load(bad)
    assert "\n" not in str(err.value)


def test_run_gives_a_job_its_env_and_records_its_end(tmp_path):
    wt = _clean_checkout(tmp_path)
    out = tmp_path / "seen"
    code = f"import os; open({str(out)!r}, 'w').write(os.environ['TOOLDECODE_X'])"
    data = {
        "job": [
            {
                "id": "j",
                "cmd": [sys.executable, "-c", code],
                "minutes": 1,
                "state": "pending",
                "env": {"TOOLDECODE_X": "~/kv"},
            },
            {"id": "k", "cmd": [sys.executable, "-c", "pass"], "minutes": 1, "state": "done"},
        ]
    }
    assert jobqueue.run(data, wt, None) == 0
    assert out.read_text() == str(Path("~/kv").expanduser())
    state = json.loads((wt / "queue-logs" / "state.json").read_text())
    assert set(state) == {"j"} and state["j"]["rc"] == 0
    assert "TOOLDECODE_X=~/kv" in (wt / "queue-logs" / "j.log").read_text()


def test_stop_ends_the_running_queue_before_its_next_job(tmp_path):
    wt = _clean_checkout(tmp_path)
    with pytest.raises(SystemExit, match="no queue has run"):
        jobqueue.main(["stop", "--worktree", str(wt)])
    (wt / "queue-logs").mkdir()
    assert jobqueue.main(["stop", "--worktree", str(wt)]) == 0
    out = tmp_path / "ran"
    data = {"job": [{"id": "j", "cmd": [sys.executable, "-c", f"open({str(out)!r}, 'w')"], "minutes": 1,
                     "state": "pending"}]}  # fmt: skip
    assert jobqueue.run(data, wt, None) == 0
    assert not out.exists() and not (wt / "queue-logs" / "stop").exists()  # stopped once, file gone
    assert jobqueue.run(data, wt, None) == 0 and out.exists()  # the next run goes on


def test_a_jobs_when_runs_it_skips_it_or_stops_the_queue(tmp_path):
    wt = _clean_checkout(tmp_path)

    def job(name: str, when_rc: int) -> dict:
        say = f"import sys; print('because {name}'); sys.exit({when_rc})"
        return {"id": name, "cmd": [sys.executable, "-c", f"open({str(tmp_path / name)!r}, 'w')"],
                "minutes": 1, "state": "pending", "when": [sys.executable, "-c", say]}  # fmt: skip

    data = {"job": [job("a", 0), job("b", 1), job("c", 2), job("d", 0)]}
    assert jobqueue.run(data, wt, None) == 2  # c's 'when' stops the queue before d
    assert [(tmp_path / n).exists() for n in "abcd"] == [True, False, False, False]
    state = json.loads((wt / "queue-logs" / "state.json").read_text())
    assert state["a"]["rc"] == 0 and state["b"]["skipped"] == "because b" and "c" not in state
    assert "when: rc 1: because b" in (wt / "queue-logs" / "b.log").read_text()
    # a skipped job is asked again on the next run
    data["job"][1] = job("b", 0)
    data["job"][2] = job("c", 0)
    assert jobqueue.run(data, wt, None) == 0
    assert all((tmp_path / n).exists() for n in "abcd")
    lines = jobqueue.status(data)
    assert "(if -c import sys" in lines[1] and "4 of them in jobs that run only if" in lines[-1]


def test_a_when_that_is_not_a_list_of_strings_is_one_line(tmp_path):
    bad = tmp_path / "q.toml"
    bad.write_text('[[job]]\nid = "a"\ncmd = ["true"]\nminutes = 1\nstate = "pending"\nwhen = "true"\n')
    with pytest.raises(SystemExit, match=r"job 1: 'when' must be a list of strings"):
        jobqueue.load(bad)


def test_the_committed_queues_gates_name_the_rules_doses_and_the_recipe_they_train():
    """Each dose_gate in experiments/queue.toml names a dose of the committed rule, and an ``epochs`` gate
    names the very recipe its job trains."""
    import tomllib

    from experiments.organism_rows import dose_rule_of

    root = Path(__file__).resolve().parents[1]
    spec = tomllib.loads((root / "experiments" / "e19_organisms_gen2.toml").read_text(encoding="utf-8"))
    rule = dose_rule_of(spec)
    assert rule is not None
    doses = {str(d["organism"]).split(":", 1)[1].split("@", 1)[0] for d in rule["doses"]}
    gated = [j for j in jobqueue.load()["job"] if "experiments.dose_gate" in j.get("when", [])]
    assert len(gated) >= 10
    for job in gated:
        what, arg = job["when"][-2:]
        if what == "epochs":
            assert (root / arg).is_file() and arg in job["cmd"], job["id"]
        else:
            assert what in ("next", "chosen") and arg in doses, job["id"]
            assert any(arg in part for part in job["cmd"]), job["id"]


def test_the_pending_jobs_that_resume_a_committed_run_ask_for_what_it_was_made_with_or_fewer():
    """A pending ``tooldecode run SPEC --out RUN`` whose run is committed resumes only if the spec's
    config is the run's, or draws fewer of an arm (a dated amendment): its ``n_by_mode`` may narrow
    the stored one and nothing else is compared here (the run store refuses any other change)."""
    from tooldecode.experiments.spec import load_spec
    from tooldecode.records import samples_per_arm

    root = Path(jobqueue.__file__).resolve().parents[1]
    checked = 0
    for job in jobqueue.load()["job"]:
        cmd = list(job["cmd"])
        if job["state"] != "pending" or cmd[:2] != ["tooldecode", "run"] or "--out" not in cmd:
            continue
        manifest = root / cmd[cmd.index("--out") + 1] / "manifest.json"
        if not manifest.exists():
            continue
        stored = json.loads(manifest.read_text())["config"]
        spec = load_spec(root / cmd[2])
        n = int(stored.get("n") or 0)
        assert spec.n == n, f"{job['id']}: the spec's n {spec.n} is not the run's {n}"
        for arm in stored["arms"]:
            now = samples_per_arm(spec.n_by_mode or {}, spec.n, arm["mode"], arm.get("level"))
            made = samples_per_arm(stored.get("n_by_mode") or {}, n, arm["mode"], arm.get("level"))
            assert now <= made, f"{job['id']}: {arm['mode']}@{arm.get('level')} asks {now} > {made}"
        checked += 1
    assert checked >= 2  # E17's strict-aligned on both models, at least


def test_collect_copies_a_jobs_rows_marks_what_ended_and_never_replaces_a_row(tmp_path):
    root, wt = tmp_path / "main", tmp_path / "wt"
    queue = root / "experiments" / "queue.toml"
    queue.parent.mkdir(parents=True)
    job = '[[job]]\nid = "{id}"\ncmd = ["tooldecode", "run", "s.toml", "--out", "runs/{id}"]\nminutes = 1\nstate = "pending"\n'
    queue.write_text("".join(job.format(id=i) for i in ("a", "b", "c")))
    for i, rows in (("a", b'{"k": 1}\n{"k": 2}\n'), ("b", b'{"k": 1}\n'), ("c", b'{"k": 9}\n{"k": 3}\n')):
        (wt / "runs" / i).mkdir(parents=True)
        (wt / "runs" / i / "manifest.json").write_text("{}")
        (wt / "runs" / i / "samples.jsonl").write_bytes(rows)
    (root / "runs" / "c").mkdir(parents=True)
    (root / "runs" / "c" / "samples.jsonl").write_bytes(b'{"k": 1}\n')  # not the start of wt's rows
    (wt / "queue-logs").mkdir()
    (wt / "queue-logs" / "state.json").write_text(
        json.dumps({"a": {"rc": 0}, "b": {"rc": 130}, "c": {"rc": 0}})
    )
    lines, rc = jobqueue.collect(jobqueue.load(queue), wt, root=root, queue=queue)
    assert rc == 1
    assert (root / "runs" / "a" / "samples.jsonl").read_bytes() == b'{"k": 1}\n{"k": 2}\n'
    assert (root / "runs" / "b" / "samples.jsonl").read_bytes() == b'{"k": 1}\n'  # interrupted: copied
    assert (root / "runs" / "c" / "samples.jsonl").read_bytes() == b'{"k": 1}\n'  # left as it was
    assert "a: runs/a copied (2 samples, ended)" in lines and "a: marked done" in lines
    assert any(line.startswith("c: ") and "left as it is" in line for line in lines)
    states = {j["id"]: j["state"] for j in jobqueue.load(queue)["job"]}
    assert states == {"a": "done", "b": "pending", "c": "pending"}
    # again: nothing new to copy, and a done job is not looked at
    lines, _ = jobqueue.collect(jobqueue.load(queue), wt, root=root, queue=queue)
    assert not any(line.startswith(("a:", "b:")) for line in lines)
    # a run its job is writing (the run's write lock held) is left for later, whatever it holds
    from tooldecode.runs.store import RunLock

    (wt / "runs" / "b" / "samples.jsonl").write_bytes(b'{"k": 1}\n{"k": 2}\n')
    writer = RunLock(wt / "runs" / "b")
    try:
        lines, _ = jobqueue.collect(jobqueue.load(queue), wt, root=root, queue=queue)
    finally:
        writer.release()
    assert "b: runs/b is being written; collect it once its job has ended or stopped" in lines
    assert (root / "runs" / "b" / "samples.jsonl").read_bytes() == b'{"k": 1}\n'


def test_collect_copies_an_extension_folder_of_continued_draws(tmp_path):
    root, wt = tmp_path / "main", tmp_path / "wt"
    queue = root / "experiments" / "queue.toml"
    queue.parent.mkdir(parents=True)
    queue.write_text(
        '[[job]]\nid = "x"\ncmd = ["tooldecode", "runs", "extend", "runs/r", "--cap", "64", "--out", "runs/r-ext"]\n'
        'minutes = 1\nstate = "pending"\n'
    )
    (wt / "runs" / "r-ext").mkdir(parents=True)
    (wt / "runs" / "r-ext" / "extend.json").write_text('{"cap": 64}')
    (wt / "runs" / "r-ext" / "extended.jsonl").write_bytes(b'{"key": 1}\n{"key": 2}\n')
    (wt / "queue-logs").mkdir()
    (wt / "queue-logs" / "state.json").write_text(json.dumps({"x": {"rc": 0}}))
    lines, rc = jobqueue.collect(jobqueue.load(queue), wt, root=root, queue=queue)
    assert rc == 0 and "x: runs/r-ext copied (2 continued draws, ended)" in lines
    assert (root / "runs" / "r-ext" / "extended.jsonl").read_bytes() == b'{"key": 1}\n{"key": 2}\n'
    assert (root / "runs" / "r-ext" / "extend.json").read_text() == '{"cap": 64}'


def test_collect_copies_whole_rows_of_a_run_stopped_in_an_append(tmp_path):
    """A job stopped in the middle of an append leaves a torn last line; collect copies the whole rows
    only, so the run that resumes (and cuts the torn line) still extends what was collected."""
    root, wt = tmp_path / "main", tmp_path / "wt"
    queue = root / "experiments" / "queue.toml"
    queue.parent.mkdir(parents=True)
    queue.write_text(
        '[[job]]\nid = "a"\ncmd = ["tooldecode", "run", "s.toml", "--out", "runs/a"]\nminutes = 1\nstate = "pending"\n'
    )
    (wt / "runs" / "a").mkdir(parents=True)
    (wt / "runs" / "a" / "manifest.json").write_text("{}")
    rows = wt / "runs" / "a" / "samples.jsonl"
    rows.write_bytes(b'{"k": 1}\n{"k": 2}\n{"k": ')
    (wt / "queue-logs").mkdir()
    (wt / "queue-logs" / "state.json").write_text(json.dumps({"a": {"stopped": "--until"}}))
    lines, rc = jobqueue.collect(jobqueue.load(queue), wt, root=root, queue=queue)
    assert rc == 0 and "a: runs/a copied (2 samples)" in lines
    assert (root / "runs" / "a" / "samples.jsonl").read_bytes() == b'{"k": 1}\n{"k": 2}\n'
    lines, _ = jobqueue.collect(jobqueue.load(queue), wt, root=root, queue=queue)
    assert lines == []  # the torn line alone is nothing new
    rows.write_bytes(b'{"k": 1}\n{"k": 2}\n{"k": 3}\n')  # resumed: the torn line cut and redone
    lines, rc = jobqueue.collect(jobqueue.load(queue), wt, root=root, queue=queue)
    assert rc == 0 and (root / "runs" / "a" / "samples.jsonl").read_bytes() == rows.read_bytes()
    assert jobqueue.load(queue)["job"][0]["state"] == "pending"  # stopped, not ended


def test_a_job_whose_needs_are_not_done_is_passed_over_with_the_organisms_it_names(tmp_path):
    """``needs`` and the training job of an organism a command names (``organism:NAME@``) must be done
    before a job starts; a job passed over runs on a later call once they are."""
    wt = _clean_checkout(tmp_path)
    (wt / "r.toml").write_text('name = "g9"\n')

    def touch(name: str) -> list[str]:
        return [sys.executable, "-c", f"open({str(tmp_path / name)!r}, 'w')", "organism:g9@base"]

    data = {
        "job": [
            {"id": "train", "cmd": ["tooldecode", "organisms", "train", "r.toml"], "minutes": 1,
             "state": "pending", "when": [sys.executable, "-c", "import sys; sys.exit(1)"]},
            {"id": "eval", "cmd": touch("eval"), "minutes": 1, "state": "pending"},
            {"id": "after", "cmd": touch("after")[:-1], "minutes": 1, "state": "pending", "needs": ["eval"]},
        ]
    }  # fmt: skip
    assert jobqueue.needs_of(data, wt) == {"train": [], "eval": ["train"], "after": ["eval"]}
    assert jobqueue.run(data, wt, None) == 0  # train skipped by its 'when', so eval and after wait
    assert not (tmp_path / "eval").exists() and not (tmp_path / "after").exists()
    data["job"][0]["state"] = "done"
    assert jobqueue.run(data, wt, None) == 0
    assert (tmp_path / "eval").exists() and (tmp_path / "after").exists()
    bad = tmp_path / "q.toml"
    bad.write_text('[[job]]\nid = "a"\ncmd = ["true"]\nminutes = 1\nstate = "pending"\nneeds = ["b"]\n')
    with pytest.raises(SystemExit, match=r"job 1: 'needs' must be a list of the ids of jobs before it"):
        jobqueue.load(bad)


def test_until_passes_over_what_would_not_end_and_stops_what_resumes(tmp_path):
    """With ``--until``: a job that does not write a run folder starts only if its minutes end before
    then; one that does (``--out``) runs until then, is stopped, and is left for ``collect``."""
    import time

    wt = _clean_checkout(tmp_path)
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    data = {
        "job": [
            {"id": "long", "cmd": [sys.executable, "-c", f"open({str(tmp_path / 'long')!r}, 'w')"],
             "minutes": 30, "state": "pending"},
            {"id": "short", "cmd": [sys.executable, "-c", f"open({str(tmp_path / 'short')!r}, 'w')"],
             "minutes": 0.01, "state": "pending"},
            {"id": "resumes", "cmd": [*sleep, "--out", "runs/x"], "minutes": 80, "state": "pending"},
            {"id": "next", "cmd": [sys.executable, "-c", "pass", "--out", "runs/y"], "minutes": 1,
             "state": "pending"},
        ]
    }  # fmt: skip
    t0 = time.time()
    assert jobqueue.run(data, wt, None, until=t0 + 3) == 0
    assert time.time() - t0 < 30  # stopped at --until, not after its 60 s
    assert not (tmp_path / "long").exists() and (tmp_path / "short").exists()
    state = json.loads((wt / "queue-logs" / "state.json").read_text())
    assert state["resumes"]["stopped"] == "--until" and "rc" not in state["resumes"] and "next" not in state
    with pytest.raises(SystemExit, match=r"--until '25:00' is not a time of day HH:MM"):
        jobqueue.main(["run", "--worktree", str(wt), "--until", "25:00"])
    now = 1_000_000 * 86400 + 13 * 3600  # 13:00 UTC on some day
    assert jobqueue.until_epoch("13:35", now) == now + 35 * 60
    assert jobqueue.until_epoch("12:00", now) == now + 23 * 3600
