#!/usr/bin/env python3
"""gpu_commands.py DIR: compares what hsi's commands wrote with --device cpu
and --device cuda in DIR (bench/gpu_check.sh's "commands" stage) and prints
one JSON line per comparison, then a last line {"detail": "..."} that the
stage reports. Standard library only (the GPU image may lack numpy).

  stats_{cpu,cuda}.json     hsi stats --json: count/min/max equal, mean and
                            std to 1e-9 of their scale
  prep_{cpu,cuda}           hsi preprocess (float32 BSQ): max |diff| over the
                            CPU output's range
  run_{cpu,cuda}/metrics.json  hsi train: test OA of each
  map_{cpu,cuda}            hsi predict with the CPU-trained run: pixels equal
  run_gemm{,_graph,_host}/model.safetensors  hsi train --device cuda --conv
                            gemm as usual, with --cuda-graph, with
                            --host-patches: the same bytes
  map_cuda{,_graph}         hsi predict --device cuda without and with
                            --cuda-graph: pixels equal
  bench_{cpu,cuda}.json     hsi bench model --json: samples/s, GPU over CPU
Exit status 1 when a comparison is outside its tolerance or a file is
missing, else 0.

gpu_commands.py --salinas DIR SEED...: the "salinas_a" stage's runs,
DIR/run_{cpu,cuda}_sSEED/metrics.json (hsi train on Salinas-A): one JSON
line per run (test OA, AA, kappa, seconds), then the mean and sample std of
the test OA per device; ok when every run is there and |mean cuda - mean
cpu| <= max(2 x the larger of the two stds, 0.02). Same last line and exit
status."""
import array
import json
import os
import statistics
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def floats(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a


def main():
    d = sys.argv[1]
    out, bad, notes = [], 0, []

    def emit(rec, ok, note):
        nonlocal bad
        rec["ok"] = ok
        out.append(rec)
        notes.append(note + ("" if ok else " (OUT OF TOLERANCE)"))
        bad += not ok

    def have(*names):
        miss = [n for n in names if not os.path.exists(os.path.join(d, n))]
        for n in miss:
            emit({"compare": n, "error": "missing"}, False, "%s missing" % n)
        return not miss

    if have("stats_cpu.json", "stats_cuda.json"):
        a, b = load(os.path.join(d, "stats_cpu.json")), load(os.path.join(d, "stats_cuda.json"))
        worst, exact = 0.0, True
        for x, y in zip(a["stats"], b["stats"]):
            exact &= all(x[k] == y[k] for k in ("count", "min", "max"))
            sc = abs(x["mean"]) + x["std"] + 1e-300
            for v in (abs(x["mean"] - y["mean"]) / sc, abs(x["std"] - y["std"]) / sc):
                worst = v if not v <= worst else worst  # a NaN sticks (max() would skip it)
        ok = exact and worst <= 1e-9 and len(a["stats"]) == len(b["stats"])
        emit({"compare": "stats", "bands": len(a["stats"]), "exact_count_min_max": exact,
              "max_rel_diff_mean_std": worst}, ok,
             "stats: %d bands, count/min/max %s, mean/std %.2g" % (len(a["stats"]),
                                                                   "equal" if exact else "DIFFER", worst))
    if have("prep_cpu", "prep_cuda"):
        a, b = floats(os.path.join(d, "prep_cpu")), floats(os.path.join(d, "prep_cuda"))
        rng = (max(a) - min(a)) if len(a) else 1.0
        diff = max((abs(x - y) for x, y in zip(a, b)), default=0.0) / (rng or 1.0)
        if any(v != v for v in b):  # max() skips a NaN; the GPU's output must have none
            diff = float("nan")
        ok = len(a) == len(b) and diff <= 1e-4
        emit({"compare": "preprocess", "values": len(a), "max_abs_diff_over_range": diff}, ok,
             "preprocess: %d values, max diff %.2g of the range" % (len(a), diff))
    if have("run_cpu/metrics.json", "run_cuda/metrics.json"):
        oa = [load(os.path.join(d, "run_%s/metrics.json" % k)).get("oa") for k in ("cpu", "cuda")]
        ok = None not in oa and abs(oa[0] - oa[1]) <= 0.05
        emit({"compare": "train", "oa_cpu": oa[0], "oa_cuda": oa[1]}, ok,
             "train: test OA cpu %s, cuda %s" % (oa[0], oa[1]))
    def two(x, y):
        r = []
        for n in (x, y):
            with open(os.path.join(d, n), "rb") as f:
                r.append(f.read())
        return r

    for x, y, name, label in (("map_cpu", "map_cuda", "predict", "predict"),
                              ("map_cuda", "map_cuda_graph", "predict_cuda_graph", "predict --cuda-graph")):
        if have(x, y):
            a, b = two(x, y)
            same = sum(p == q for p, q in zip(a, b)) / max(len(a), 1)
            ok = len(a) == len(b) and same >= 0.999
            emit({"compare": name, "bytes": len(a), "fraction_equal": same}, ok,
                 "%s: %.4f of the map equal" % (label, same))
    for ref, other, what in (("gemm", "graph", "--cuda-graph"), ("gemm", "host", "--host-patches"),
                             ("gemm_3", "resume", "2 epochs, then --resume to 3")):
        x, y = "run_%s/model.safetensors" % ref, "run_gemm_%s/model.safetensors" % other
        if have(x, y):
            a, b = two(x, y)
            emit({"compare": "train_gemm_vs_" + other, "bytes": len(a), "identical": a == b}, a == b,
                 "train %s: the model %s" % (what, "identical" if a == b else "DIFFERS"))
    if have("bench_cpu.json", "bench_cuda.json"):
        a, b = load(os.path.join(d, "bench_cpu.json")), load(os.path.join(d, "bench_cuda.json"))
        r = {k: b[k] / a[k] for k in ("train_samples_per_s", "infer_samples_per_s") if a.get(k)}
        emit({"compare": "bench_model_cnn2d", "cpu": a, "cuda": b, "cuda_over_cpu": r}, True,
             "bench model cnn2d: GPU/CPU train %.1fx, infer %.1fx" % (
                 r.get("train_samples_per_s", 0), r.get("infer_samples_per_s", 0)))
    for rec in out:
        print(json.dumps(rec))
    print(json.dumps({"detail": "; ".join(notes)}))
    return 1 if bad else 0


def salinas(d, seeds):
    out, bad, notes, oa = [], 0, [], {"cpu": [], "cuda": []}
    seeds = [int(s) if s.isdigit() else s for s in seeds]
    for dev in ("cpu", "cuda"):
        for s in seeds:
            name = "run_%s_s%s/metrics.json" % (dev, s)
            try:
                m = load(os.path.join(d, name))
            except (OSError, ValueError) as e:
                out.append({"compare": "salinas_a_run", "device": dev, "seed": s,
                            "error": "%s: %s" % (name, getattr(e, "strerror", None) or e)})
                notes.append("%s seed %s: no metrics.json" % (dev, s))
                bad += 1
                continue
            t = m.get("timings_s", {})
            out.append({"compare": "salinas_a_run", "device": dev, "seed": s, "oa": m.get("oa"),
                        "aa": m.get("aa"), "kappa": m.get("kappa"), "train_s": t.get("train"),
                        "total_s": t.get("total"), "n": m.get("split_counts")})
            if isinstance(m.get("oa"), (int, float)):
                oa[dev].append(m["oa"])
            else:
                notes.append("%s seed %s: no OA in metrics.json" % (dev, s))
                bad += 1
    rec = {"compare": "salinas_a", "seeds": seeds}
    for dev in ("cpu", "cuda"):
        v = oa[dev]
        rec[dev] = {"runs": len(v), "oa": v, "mean": statistics.mean(v) if v else None,
                    "std": statistics.stdev(v) if len(v) > 1 else (0.0 if v else None)}
    if oa["cpu"] and oa["cuda"]:
        diff = abs(rec["cuda"]["mean"] - rec["cpu"]["mean"])
        tol = max(2 * max(rec["cpu"]["std"], rec["cuda"]["std"]), 0.02)
        ok = not bad and diff <= tol
        rec.update({"abs_diff_mean": diff, "tolerance": tol, "ok": ok})
        notes.insert(0, "Salinas-A test OA cpu %.4f +- %.4f (%d runs), cuda %.4f +- %.4f (%d runs), "
                        "|diff| %.4f, tolerance %.4f%s" % (
                            rec["cpu"]["mean"], rec["cpu"]["std"], len(oa["cpu"]),
                            rec["cuda"]["mean"], rec["cuda"]["std"], len(oa["cuda"]), diff, tol,
                            "" if diff <= tol else " (OUT OF TOLERANCE)"))
    else:
        rec["ok"] = False
        notes.insert(0, "Salinas-A: no OA to compare (cpu %d runs, cuda %d runs)"
                     % (len(oa["cpu"]), len(oa["cuda"])))
        bad += 1
    out.append(rec)
    for r in out:
        print(json.dumps(r))
    print(json.dumps({"detail": "; ".join(notes)}))
    return 1 if bad or not rec["ok"] else 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--salinas":
        sys.exit(salinas(sys.argv[2], sys.argv[3:]))
    sys.exit(main())
