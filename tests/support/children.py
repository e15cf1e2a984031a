"""Running code in a child process, so that a crash fails the calling test instead of
killing pytest: run_child (one source), child_outcomes (many bad-input cases, each
outcome by name), and the environment they run in."""
import json
import os
import resource
import subprocess
import sys
import textwrap
from typing import Dict, Optional, Tuple

import torchsparsegradutils as tsgu


# Set by .ci/sanitize when the C extension is an ASan+UBSan build: tests that
# need a memory limit (RLIMIT_AS and ASan's shadow memory do not mix) or that
# measure peak memory skip themselves under it.
SANITIZED = bool(os.environ.get("TSGU_SANITIZE"))
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(tsgu.__file__)))


CHILD_PRELUDE = """
import warnings, torch
warnings.simplefilter("ignore")
import torchsparsegradutils as tsgu
import torchsparsegradutils.distributions, torchsparsegradutils.encoders, torchsparsegradutils.nn
from torchsparsegradutils import *
"""


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    return env


def run_child(code: str, timeout: float = 120, memory_limit: Optional[int] = None,
              env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Run `code` (after CHILD_PRELUDE) in a fresh interpreter, so that a crash
    fails the calling test instead of killing pytest; memory_limit caps the
    address space (RLIMIT_AS, bytes; not under SANITIZED, where ASan's shadow
    memory needs terabytes of it); env adds environment variables.  Returns the
    CompletedProcess (text)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    return subprocess.run([sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env={**child_env(), **(env or {})},
                          preexec_fn=limit if memory_limit is not None else None)


_CASE_RUNNER = """
import json, sys

def arrays(t):
    if t.layout == torch.sparse_coo:
        return [t._indices(), t._values()]
    if t.layout == torch.sparse_csr:
        return [t.crow_indices(), t.col_indices(), t.values()]
    return [t]

def run(src):
    ns = dict(globals())
    before = None
    try:
        exec(src, ns)
        before = [a.clone() for t in ns["inputs"] for a in arrays(t)]
        ns["call"]()
        outcome = ["OK", ""]
    except Exception as e:
        outcome = [type(e).__name__, str(e)]
    after = [a for t in ns.get("inputs", []) for a in arrays(t)]
    if before is not None and not all(torch.equal(x, y) for x, y in zip(before, after)):
        outcome = ["MODIFIED", "an input was modified"]
    return outcome

for name, src in json.loads(sys.stdin.read()):
    print(MARK + json.dumps(["START", name]), flush=True)
    print(MARK + json.dumps(["END", name] + run(src)), flush=True)
"""
_MARK = "@@tsgu-case "     # starts the runner's own lines in the child's stdout


def child_outcomes(cases: Dict[str, str], timeout: float = 300) -> Dict[str, Tuple[str, str]]:
    """Run every case (a source defining `inputs`, the tensors that must stay
    unchanged, and `call`, a thunk) in child processes: one runs the cases in
    turn and, after a crash, a fresh one goes on with the rest.  Returns
    name -> (outcome, message): outcome is the exception's type name, "OK",
    "MODIFIED" (an input changed), or "CRASH" (message: exit status and stderr)."""
    todo = list(cases.items())
    results: Dict[str, Tuple[str, str]] = {}
    while todo:
        r = subprocess.run([sys.executable, "-c", CHILD_PRELUDE + f"MARK = {_MARK!r}\n" + _CASE_RUNNER],
                           input=json.dumps(todo), capture_output=True, text=True, timeout=timeout, env=child_env())
        started = None
        for line in r.stdout.splitlines():
            if not line.startswith(_MARK):
                continue
            msg = json.loads(line[len(_MARK):])
            if msg[0] == "START":
                started = msg[1]
            elif msg[0] == "END":
                results[msg[1]] = (msg[2], msg[3])
                started = None
        if started is None and r.returncode == 0:
            break
        if started is None:      # died outside any case
            started = next(name for name, _ in todo if name not in results)
        err = r.stderr if len(r.stderr) <= 4000 else r.stderr[:2000] + "\n...\n" + r.stderr[-2000:]
        results[started] = ("CRASH", f"exit status {r.returncode}: {err}")   # a sanitizer report opens with its cause
        todo = [(name, src) for name, src in todo if name not in results]
    return results
