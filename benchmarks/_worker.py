"""Subprocess worker: one job from a JSON document on stdin, one JSON line out on stdout.

Started by benchmarks/sparse_mm.py as ``python -I benchmarks/_worker.py``:
- with the system interpreter, to measure the peak memory of one method on one
  case in a fresh process;
- with the interpreter of the published release's venv, to time (and measure)
  the published ``torchsparsegradutils``, which shares our import name.

It loads _matrices.py and _harness.py by file path (not as the ``benchmarks``
package) so that nothing from this repository lands on sys.path: under ``-I``
the repository's own ``torchsparsegradutils`` cannot shadow the release.

Job keys: mode ("time" | "memory"), groups (each: id, spec = MatrixSpec fields,
ps, dtype, index_dtype), methods, published, reps, warmup, threads, limits, smoke
(freeze the garbage collector's generations after the imports: harness.freeze_gc).
"""
import importlib.util
import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod              # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    job = json.loads(sys.stdin.read())
    import torch

    mats = _load("_matrices")
    harness = _load("_harness")
    harness.env_threads(job["threads"])
    import torchsparsegradutils as tsgu

    if job.get("limits"):
        harness.set_limits(**job["limits"])
    if job.get("smoke"):
        harness.freeze_gc()
    out = {"module_file": tsgu.__file__, "module_version": getattr(tsgu, "__version__", "?"),
           "torch": torch.__version__, "results": []}
    methods = harness.methods_here(job["published"])
    for group in job["groups"]:
        spec = mats.MatrixSpec(**group["spec"])
        indices, shape = mats.pattern(spec)
        dtype = getattr(torch, group["dtype"])
        itype = getattr(torch, group["index_dtype"])
        for p in group["ps"]:
            inp = mats.make_inputs(indices, shape, p, dtype, itype, spec.kind)
            ref = harness.reference(inp) if job["mode"] == "time" else None
            for name in job["methods"]:
                row = {"group": group["id"], "p": p, "method": name}
                try:
                    prep = methods[name](inp)
                    if job["mode"] == "time":
                        row["check"] = harness.check(prep, inp, ref)
                        row["timing"] = harness.time_method(prep, inp["G"], job["reps"], job["warmup"])
                    else:
                        row["memory"] = harness.peak_memory(prep, inp["G"])
                        row["memory"]["necessary_bytes"] = harness.necessary_bytes(inp)
                    row["bwd_skip"] = prep.bwd_skip
                    del prep
                except Exception as e:  # noqa: BLE001 - reported, not hidden
                    row.update(harness.failure(e))
                    if "error" in row:
                        row["traceback"] = traceback.format_exc(limit=3)
                out["results"].append(row)
                print(json.dumps({"progress": row}), file=sys.stderr, flush=True)
            del inp, ref
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
