"""The study's queue of long jobs (``experiments/queue.toml``): print it, resume it, mark a job.

    python -m scripts.jobqueue status                      # jobs, order, estimated minutes, state
    python -m scripts.jobqueue run --worktree DIR [--only ID ...] [--until HH:MM]
                                                        # resume the pending jobs in order, in DIR
    python -m scripts.jobqueue mark ID done                # after the job's output is committed
    python -m scripts.jobqueue stop --worktree DIR         # the running queue stops before its next job
    python -m scripts.jobqueue collect --worktree DIR      # bring DIR's results here, mark what ended

``run`` needs ``DIR`` to be a clean checkout (``git status --porcelain`` empty, untracked files and the
rows of runs under ``runs/`` aside: data, not code, as the manifests' ``git_dirty`` counts it) and
runs each job there with its ``.venv`` (its ``env`` table, if any, added to the environment, ``~``
expanded; the run manifests record ``TOOLDECODE_*`` settings); a job's log goes to
``DIR/queue-logs/<id>.log`` (appended) and
its end to ``DIR/queue-logs/state.json``. A job with a ``when`` command (a list, run in ``DIR`` with its
``.venv``'s python for ``python``) runs only if that command exits 0; exit 1 skips it for now (its line
of output goes to the log and ``state.json``; the next ``run`` asks again), any other exit stops the queue
(``experiments.dose_gate`` is such a command: the dose ladder's later rungs run only if the rule needs
them). ``stop`` leaves ``DIR/queue-logs/stop``: the queue running there
ends once its current job has ended, before the next one starts (and removes the file), so the worktree
can move to a newer commit between jobs without killing one. Jobs resume where they stopped, so an interrupted queue is
resumed by the same command. One job at a time: never two model-heavy jobs at once.

A job's needs must all be done (in the queue file, or ended with rc 0 in ``DIR``) before it starts;
otherwise it is passed over for this run. They are its ``needs`` (a list of ids of jobs before it) and,
implied, the training job of every organism its command names (``organism:NAME@…``, where a job
``tooldecode organisms train`` trains the recipe ``NAME``). ``--until HH:MM`` (UTC, today, or
tomorrow if that time has passed) is the end of the machine's time: a job that writes a run folder
(``--out``) resumes on any machine from the rows ``collect`` brought in, so it runs until then and is
stopped there (SIGTERM, its rows whole: ``tooldecode.runs.store``), to be collected; any other job (a
training, whose checkpoints stay on the machine) starts only if its estimated minutes end before then,
and is passed over otherwise, with the jobs that need it. So a session given ``--until`` spends its
start on what must run whole and its tail on what resumes.

``collect`` brings what the queue made in ``DIR`` into this checkout, for a commit: each pending job's run
folder (its ``--out``) where ``DIR``'s holds samples this one lacks, its raw files (``manifest.json``,
``samples.jsonl``, ``timing.json``, ``probe.jsonl``, ``decision.jsonl``) copied only when this checkout's
rows are the start of ``DIR``'s, so no raw row here is ever replaced, a ``.jsonl`` file up to its last
newline (a job stopped in an append leaves a torn line, cut when it resumes), and never while a job writes them
(the run's write lock); each ``organisms train`` job that
ended well, through ``tooldecode organisms commit`` (its 16-bit adapter and manifest); and each job that
ended with rc 0 marked ``done`` in the queue file. It prints what it did; it commits nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from tooldecode.errors import RunError
from tooldecode.runs.store import RunLock

ROOT = Path(__file__).resolve().parents[1]
QUEUE = ROOT / "experiments" / "queue.toml"
STATES = ("pending", "running", "done", "blocked")


def load(path: Path = QUEUE) -> dict:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise SystemExit(f"queue: {path}: not a readable queue file ({err}); restore it with git") from None
    jobs = data.get("job", [])
    seen = set()
    for k, job in enumerate(jobs):
        where = f"{path}: job {k + 1}"
        for field, kind in (("id", str), ("cmd", list), ("minutes", (int, float)), ("state", str)):
            if not isinstance(job.get(field), kind):
                raise SystemExit(f"queue: {where}: '{field}' is missing or of the wrong type; fix the file")
        if job["state"] not in STATES:
            raise SystemExit(f"queue: {where}: state {job['state']!r} is not one of {', '.join(STATES)}")
        env = job.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise SystemExit(
                f"queue: {where}: 'env' must be a table of strings (NAME = \"value\"); fix the file"
            )
        when = job.get("when", [])
        if not isinstance(when, list) or not all(isinstance(w, str) for w in when):
            raise SystemExit(f"queue: {where}: 'when' must be a list of strings (a command); fix the file")
        needs = job.get("needs", [])
        if not isinstance(needs, list) or not all(isinstance(n, str) and n in seen for n in needs):
            raise SystemExit(
                f"queue: {where}: 'needs' must be a list of the ids of jobs before it; fix the file"
            )
        if job["id"] in seen:
            raise SystemExit(f"queue: {where}: id {job['id']!r} appears twice; ids are unique")
        seen.add(job["id"])
    return data


def status(data: dict) -> list[str]:
    lines = [f"{'#':>2}  {'job':32s} {'min':>5}  state"]
    left = cond = 0.0
    for k, job in enumerate(data.get("job", []), 1):
        when = f"  (if {' '.join(job['when'][-2:])})" if job.get("when") else ""
        lines.append(f"{k:>2}  {job['id']:32s} {job['minutes']:>5}  {job['state']}{when}")
        if job["state"] not in ("done", "blocked"):
            left += job["minutes"]
            cond += job["minutes"] if when else 0
    lines.append(
        f"left: about {left:.0f} minutes on 2 idle cores"
        + (f", {cond:.0f} of them in jobs that run only if their 'when' says so" if cond else "")
    )
    return lines


def mark(path: Path, job_id: str, state: str) -> None:
    if state not in STATES:
        raise SystemExit(f"queue: state {state!r} is not one of {', '.join(STATES)}")
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(rf'(id = "{re.escape(job_id)}"\n(?:(?!\[\[job\]\]).*\n)*?state = )"[a-z]+"')
    new, n = pattern.subn(rf'\g<1>"{state}"', text)
    if n != 1:
        raise SystemExit(f"queue: {path}: no job {job_id!r}; `python -m scripts.jobqueue status` lists them")
    path.write_text(new, encoding="utf-8")


def _clean(worktree: Path) -> bool:
    out = subprocess.run(
        [
            "git",
            "-C",
            str(worktree),
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            ":(top,exclude)runs",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.returncode == 0 and not out.stdout.strip()


def resumable(job: dict) -> bool:
    """Whether ``job`` writes a run folder, which resumes on any machine from the rows collected."""
    return "--out" in job["cmd"]


def until_epoch(hhmm: str, now: float | None = None) -> float:
    """The next time of day ``hhmm`` (UTC) as epoch seconds: today, or tomorrow if it has passed."""
    m = re.fullmatch(r"([01]?\d|2[0-3]):([0-5]\d)", hhmm)
    if not m:
        raise SystemExit(f"queue: --until {hhmm!r} is not a time of day HH:MM (UTC); e.g. --until 13:35")
    now = time.time() if now is None else now
    day = now - now % 86400
    at = day + int(m.group(1)) * 3600 + int(m.group(2)) * 60
    return at if at > now else at + 86400


def _run_until(
    cmd: list[str], worktree: Path, log: Any, env: dict[str, str], until: float | None
) -> int | None:
    """Run ``cmd``; at ``until`` stop it with SIGTERM (then SIGKILL after 60 s) and return None."""
    proc = subprocess.Popen(cmd, cwd=worktree, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        return proc.wait(timeout=None if until is None else max(until - time.time(), 0.0))
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return None


def _recipe_name(job: dict, root: Path) -> str:
    """The recipe name (its ``name``) that a ``tooldecode organisms train RECIPE`` job trains."""
    recipe = job["cmd"][3]
    try:
        return str(tomllib.loads((root / recipe).read_text(encoding="utf-8"))["name"])
    except (OSError, tomllib.TOMLDecodeError, KeyError) as err:
        raise SystemExit(
            f"queue: job {job['id']!r}: recipe {recipe} has no readable name ({err}); fix the job"
        ) from None


def needs_of(data: dict, root: Path) -> dict[str, list[str]]:
    """Per job id, the jobs it needs: its ``needs`` and the training jobs of the organisms it names
    (recipe files read under ``root``)."""
    trained: dict[str, str] = {}
    for job in data.get("job", []):
        cmd = job["cmd"]
        if cmd[:3] == ["tooldecode", "organisms", "train"] and len(cmd) > 3:
            trained[_recipe_name(job, root)] = job["id"]
    out: dict[str, list[str]] = {}
    for job in data.get("job", []):
        named = {m.group(1) for m in re.finditer(r"organism:([^@\s]+)@", " ".join(job["cmd"]))}
        implied = [trained[n] for n in sorted(named) if n in trained and trained[n] != job["id"]]
        out[job["id"]] = [*job.get("needs", []), *(n for n in implied if n not in job.get("needs", []))]
    return out


def _passed_over(job: dict, needs: list[str], done: set[str], until: float | None) -> str:
    """Why ``job`` does not start in this run (``needs`` not done, or too long for ``--until``); ``""``
    when it may start."""
    missing = [n for n in needs if n not in done]
    if missing:
        return f"it needs {', '.join(missing)}"
    if until is not None and not resumable(job) and time.time() + job["minutes"] * 60 > until:
        return f"its {job['minutes']} minutes end after --until, and it does not resume on another machine"
    return ""


def run(data: dict, worktree: Path, only: list[str] | None, until: float | None = None) -> int:
    if not _clean(worktree):
        raise SystemExit(f"queue: {worktree} is not a clean checkout; jobs run from a clean commit")
    logs = worktree / "queue-logs"
    logs.mkdir(exist_ok=True)
    state_file = logs / "state.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    py = worktree / ".venv" / "bin" / "python"
    commit = subprocess.run(
        ["git", "-C", str(worktree), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # progress lines reach the log as they are written
    done = {
        j["id"] for j in data.get("job", []) if j["state"] == "done" or state.get(j["id"], {}).get("rc") == 0
    }
    needs = needs_of(data, worktree)
    for job in data.get("job", []):
        if job["state"] in ("done", "blocked") or (only and job["id"] not in only):
            continue
        if state.get(job["id"], {}).get("rc") == 0:
            continue
        stop = logs / "stop"
        if stop.exists():
            stop.unlink()
            print(f"queue: stopped before {job['id']} ({stop} was there)", flush=True)
            return 0
        why = _passed_over(job, needs[job["id"]], done, until)
        if why:
            print(f"queue: {job['id']}: passed over ({why})", flush=True)
            continue
        if until is not None and time.time() >= until:
            print(f"queue: stopped before {job['id']} (--until has come)", flush=True)
            return 0
        job_env = {**env, **{k: os.path.expanduser(v) for k, v in job.get("env", {}).items()}}
        if job.get("when"):
            when = list(job["when"])
            if when[0] == "python":
                when[0] = str(py)
            ask = subprocess.run(when, cwd=worktree, capture_output=True, text=True, check=False, env=job_env)
            said = (ask.stdout + ask.stderr).strip().splitlines()
            line = said[-1] if said else f"'when' exited {ask.returncode}"
            with open(logs / f"{job['id']}.log", "a", encoding="utf-8") as log:
                log.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')} when: rc {ask.returncode}: {line}\n")
            if ask.returncode == 1:
                state[job["id"]] = {"skipped": line, "commit": commit}
                state_file.write_text(json.dumps(state, indent=1) + "\n")
                print(f"queue: {job['id']}: skipped ({line})", flush=True)
                continue
            if ask.returncode != 0:
                print(f"queue: {job['id']}: 'when' stops the queue (rc {ask.returncode}): {line}", flush=True)
                return ask.returncode
        cmd = list(job["cmd"])
        if cmd[0] == "tooldecode":
            cmd = [str(py), "-m", "tooldecode", *cmd[1:]]
        t0 = time.time()
        with open(logs / f"{job['id']}.log", "a", encoding="utf-8") as log:
            log.write(
                f"== {time.strftime('%Y-%m-%d %H:%M:%S')} at {commit} (load {os.getloadavg()[0]:.2f}): "
                + "".join(f"{k}={v} " for k, v in job.get("env", {}).items())
                + f"{' '.join(cmd)}\n"
            )
            log.flush()
            ended = _run_until(cmd, worktree, log, job_env, until if resumable(job) else None)
        load_avg = os.getloadavg()[0]
        if ended is None:
            state[job["id"]] = {"stopped": "--until", "commit": commit, "wall_s": round(time.time() - t0, 1)}
            state_file.write_text(json.dumps(state, indent=1) + "\n")
            print(
                f"queue: {job['id']}: stopped at --until after {time.time() - t0:.0f} s; collect its rows",
                flush=True,
            )
            return 0
        rc = ended
        state[job["id"]] = {
            "rc": rc,
            "commit": commit,
            "wall_s": round(time.time() - t0, 1),
            "load_at_end": round(load_avg, 2),
        }
        state_file.write_text(json.dumps(state, indent=1) + "\n")
        print(f"queue: {job['id']}: rc {rc} in {time.time() - t0:.0f} s (load {load_avg:.2f})", flush=True)
        if rc != 0:
            return rc
        done.add(job["id"])
    return 0


#: the files of a run folder that a job writes and FINDINGS reads (derived ones are rebuilt here)
RAW = ("manifest.json", "samples.jsonl", "timing.json", "probe.jsonl", "decision.jsonl")
#: the files of an extension folder (`tooldecode runs extend`: a run's cut draws continued)
EXTENSION = ("extend.json", "extended.jsonl")


def _whole(path: Path) -> int:
    """The bytes of ``path`` up to its last newline: its whole rows (a run stopped in the middle of an
    append leaves a torn last line, which the run cuts off when it resumes)."""
    n = path.stat().st_size
    with open(path, "rb") as f:
        while n > 0:
            step = min(n, 1 << 16)
            f.seek(n - step)
            k = f.read(step).rfind(b"\n")
            if k >= 0:
                return n - step + k + 1
            n -= step
    return 0


def _copy_whole(there: Path, here: Path) -> None:
    """Copy ``there`` to ``here``; a ``.jsonl`` file only up to its last newline (whole rows)."""
    if there.suffix != ".jsonl":
        shutil.copyfile(there, here)
        return
    left = _whole(there)
    with open(there, "rb") as src, open(here, "wb") as dst:
        while left > 0:
            chunk = src.read(min(left, 1 << 20))
            dst.write(chunk)
            left -= len(chunk)


def _rows_extend(here: Path, there: Path) -> bool:
    """Whether ``there`` holds every byte of ``here`` at its start (a missing ``here`` is empty)."""
    if not here.exists():
        return True
    n = here.stat().st_size
    if there.stat().st_size < n:
        return False
    with open(here, "rb") as a, open(there, "rb") as b:
        while chunk := a.read(1 << 20):
            if b.read(len(chunk)) != chunk:
                return False
    return True


def _collect_run(there: Path, here: Path, out: str, ended: bool) -> tuple[str, str]:
    """Copy run folder ``there``'s raw files to ``here`` where ``there`` extends them. Returns what
    happened (``none``: nothing to copy, ``copied``, ``busy``: a job writes it, ``stale``: the rows here
    are not the start of ``there``'s) and the line to report (``""`` for ``none``)."""
    if not (there / "manifest.json").exists() and not (there / "extend.json").exists():
        return "none", ""
    try:  # the writer's lock: a run still being written is left for a later collect
        lock = RunLock(there)
    except RunError:
        return "busy", f"{out} is being written; collect it once its job has ended or stopped"
    try:
        files = [f for f in RAW + EXTENSION if (there / f).exists()]
        stale = [f for f in files if f.endswith(".jsonl") and not _rows_extend(here / f, there / f)]
        if stale:
            return "stale", (
                f"{here / stale[0]} is not the start of {there / stale[0]}; left as it is (raw rows are "
                "never replaced): compare the two and keep both where they differ"
            )
        # rows here are the start of there's, so the same size is the same rows
        changed = [
            f
            for f in files
            if not (here / f).exists()
            or (
                (here / f).stat().st_size != _whole(there / f)
                if f.endswith(".jsonl")
                else (here / f).read_bytes() != (there / f).read_bytes()
            )
        ]
        if not changed:
            return "none", ""
        here.mkdir(parents=True, exist_ok=True)
        for f in changed:
            _copy_whole(there / f, here / f)
        rows_file = "samples.jsonl" if "samples.jsonl" in files else "extended.jsonl"
        rows = (there / rows_file).read_bytes().count(b"\n") if rows_file in files else 0
        what = "samples" if rows_file == "samples.jsonl" else "continued draws"
        return "copied", f"{out} copied ({rows} {what}{', ended' if ended else ''})"
    finally:
        lock.release()


def collect(data: dict, worktree: Path, root: Path = ROOT, queue: Path = QUEUE) -> tuple[list[str], int]:
    """Bring the results of the queue that ran in ``worktree`` into the checkout at ``root`` (module
    docstring); returns the lines it reports and 0, or 1 where a run folder here could not take
    ``worktree``'s rows (left as it is, named in a line)."""
    state_file = worktree / "queue-logs" / "state.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    lines: list[str] = []
    bad = 0
    for job in data.get("job", []):
        if job["state"] != "pending":
            continue
        cmd, ended = list(job["cmd"]), state.get(job["id"], {}).get("rc") == 0
        if "--out" in cmd:
            out = cmd[cmd.index("--out") + 1]
            what, line = _collect_run(worktree / out, root / out, out, ended)
            if line:
                lines.append(f"{job['id']}: {line}")
            if what in ("busy", "stale"):
                bad |= what == "stale"
                continue
        elif cmd[:3] == ["tooldecode", "organisms", "train"] and ended:
            recipe = _recipe_name(job, root)
            name = f"{recipe}@{cmd[cmd.index('--base') + 1]}" if "--base" in cmd else recipe
            done = subprocess.run(
                [sys.executable, "-m", "tooldecode", "organisms", "commit", name],
                cwd=root,
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                lines.append(
                    f"{job['id']}: `tooldecode organisms commit {name}` failed: {done.stderr.strip()}"
                )
                bad = 1
                continue
            lines.append(f"{job['id']}: organism {name} copied into experiments/organisms")
        if ended:
            mark(queue, job["id"], "done")
            lines.append(f"{job['id']}: marked done")
    return lines, bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scripts.jobqueue", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("status")
    r = sub.add_parser("run")
    r.add_argument("--worktree", type=Path, required=True)
    r.add_argument("--only", nargs="*")
    r.add_argument("--until", help="HH:MM (UTC): the end of the machine's time (module docstring)")
    st = sub.add_parser("stop")
    st.add_argument("--worktree", type=Path, required=True)
    c = sub.add_parser("collect")
    c.add_argument("--worktree", type=Path, required=True)
    m = sub.add_parser("mark")
    m.add_argument("job")
    m.add_argument("state")
    args = p.parse_args(argv)
    data = load()
    if args.cmd == "status":
        print("\n".join(status(data)))
        return 0
    if args.cmd == "stop":
        logs = args.worktree.resolve() / "queue-logs"
        if not logs.is_dir():
            raise SystemExit(f"queue: {logs} does not exist; no queue has run in {args.worktree}")
        (logs / "stop").write_text(time.strftime("%Y-%m-%d %H:%M:%S\n"))
        print(f"queue: the queue in {args.worktree} stops before its next job")
        return 0
    if args.cmd == "collect":
        lines, rc = collect(data, args.worktree.resolve())
        print("\n".join(lines or ["queue: nothing to collect"]))
        return rc
    if args.cmd == "mark":
        mark(QUEUE, args.job, args.state)
        return 0
    until = until_epoch(args.until) if args.until else None
    return run(data, args.worktree.resolve(), args.only, until)


if __name__ == "__main__":
    sys.exit(main())
