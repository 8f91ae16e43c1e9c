"""FedALIGN's experiments at CPU scale (spec 004_fedalign §5, §6).

  python benchmarks/fedalign_cpu.py [--experiments=cpu1,cpu2,fig1_mnist,...] [--seeds=5]
                                    [--output_dir=results/fedalign] [--write_flagfiles]

Every seed s redraws the data, the priority clients and the test set (partition_seed = s)
and trains with seed s, as the authors' code does; all methods of an experiment share them,
so their curves are identical until the warm-up ends. Each experiment writes
<output_dir>/<name>.json (curves per method and seed, the claims) and <name>.png, and the
claims table is printed. ``--write_flagfiles`` writes benchmarks/configs/fedalign/
<experiment>_<method>.flags, each a run.py invocation of one method (seed 0).
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402

from fedjax_bench import config, engine, experiment, results  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("experiments", ["cpu1", "cpu2", "fig1_mnist", "fig1_mnist_small",
                                  "fig2_low", "fig2_medium", "fig2_high", "fig6_priority",
                                  "fig4_prox", "fig5_partial", "fig3_local"],
                  "Experiments to run.")
flags.DEFINE_integer("num_seeds", 5, "Seeds 0..N-1 (data, priority choice and training).")
flags.DEFINE_string("out", "results/fedalign", "Where the JSON and PNG files go.")
flags.DEFINE_bool("write_flagfiles", False, "Also write benchmarks/configs/fedalign/*.flags.")
flags.DEFINE_bool("render_only", False, "Re-plot and re-judge the claims from the saved JSON "
                  "files, without running.")

# The paper's local training (spec §3): E = 5 SGD steps, constant lr, ε = 0.2 on accuracy,
# a warm-up of 20 of 200 rounds; shuffled epochs without the partial last batch, as the
# authors' DataLoader (spec 004 §2).
COMMON = dict(local_steps=5, rounds=200, warmup_rounds=20, eval_every=5, align_epsilon=0.2,
              sampling="shuffle_drop_last")
THREE = ("fedavg_priority", "fedavg_all_clients", "fedalign")
MNIST_SHARDS = dict(dataset="mnist", model="logreg", partition="shards_random",
                    num_clients=60, num_priority=2, shards_per_client=2, batch_size=32,
                    client_lr=0.1)
EXPERIMENTS = {
    # §6 CPU-1 (mirrors Fig. 1): Gaussian clusters in shards of 10, 30 clients, 2 priority.
    "cpu1": dict(flags=dict(dataset="gaussmix_shards", num_clients=30, batch_size=10,
                            client_lr=0.1, zero_init=True), methods=THREE),
    # §6 CPU-2 (mirrors Fig. 2): Synth(1,1) priority users, 6 aligned of 20 free clients.
    "cpu2": dict(flags=dict(dataset="synth_pfl", num_clients=30, batch_size=10, client_lr=0.1,
                            zero_init=True, rounds=100), methods=THREE),
    # Fig. 1 on real MNIST: the authors' shards (120 shards of 500, 2 per client).
    "fig1_mnist": dict(flags=dict(MNIST_SHARDS, shard_size=500), methods=THREE),
    # The same with scarce priority data (shards of 20): the overfitting FedALIGN cures.
    "fig1_mnist_small": dict(flags=dict(MNIST_SHARDS, shard_size=20), methods=THREE),
    # Fig. 2: the reconstructed label-noise / irrelevant-data skews (§4.2), 10 + 10 clients.
    **{f"fig2_{level}": dict(flags=dict(dataset="synth_pfl", synth_noise="paper_skew",
                                        num_clients=20, batch_size=10, client_lr=0.1,
                                        zero_init=True, rounds=300, label_skew=skew,
                                        random_skew=skew, align_epsilon=eps),
                             methods=THREE)
       for level, skew, eps in (("low", 0.5, 0.2), ("medium", 1.5, 0.2), ("high", 5.0, 0.4))},
    # Fig. 6: more priority clients, a smaller gain (shards of 20 as in fig1_mnist_small).
    "fig6_priority": dict(flags=dict(MNIST_SHARDS, shard_size=20), methods=THREE,
                          sweep=("num_priority", (2, 6, 18))),
    # Fig. 4: FedProx (μ = 1, a real proximal gradient) with 4 priority clients.
    "fig4_prox": dict(flags=dict(MNIST_SHARDS, shard_size=20, num_priority=4),
                      methods=("fedprox_priority", "fedprox_all_clients", "fedalign_prox")),
    # Fig. 5: partial participation, 18 priority clients, a fraction 0.3 of each group.
    "fig5_partial": dict(flags=dict(MNIST_SHARDS, shard_size=20, num_priority=18,
                                    priority_fraction=0.3, free_fraction=0.3),
                         methods=THREE),
    # Fig. 3 (App. C.1): FedALIGN's global model against a model trained on one free client
    # alone, both scored on that client's test mix; 21 priority clients, 20 of the authors'
    # 120 shards of 50 per client (spec 004 §4.1, C.1), no warm-up.
    "fig3_local": dict(flags=dict(MNIST_SHARDS, shard_size=50, shards_per_client=20,
                                  num_shards=120,
                                  num_priority=21, warmup_rounds=0, test_mix="local_client"),
                       methods=("local_model", "fedalign")),
}


def run_config(flags_: dict, seed: int) -> config.Config:
  """What run.py makes of ``flags_`` and --partition_seed=seed."""
  return config.resolve(dict(flags_, partition_seed=seed), seeds=[seed])


def run_one(flags_: dict, seed: int) -> dict:
  cfg = run_config(flags_, seed)
  exp = experiment.setup(cfg, seeds=[seed])
  out = engine.run(exp.build, exp.task, exp.hparams, seeds=[seed], rounds=cfg.eval.rounds,
                   eval_every=cfg.eval.eval_every)
  m = out.history.metrics
  keep = ("test_accuracy", "train_loss", "n_admitted", "n_admitted_aligned", "theta_term")
  return {"rounds": out.history.rounds.tolist(),
          **{k: np.nan_to_num(m[k][:, 0, 0], nan=0.0).tolist() for k in keep if k in m}}


def final(curve, rounds) -> float:
  """Mean over the last 10% of the rounds (spec §5's final_m)."""
  rounds = np.asarray(rounds)
  return float(np.mean(np.asarray(curve)[rounds >= 0.9 * rounds[-1]]))


def summarize(runs: dict, warmup: int) -> dict:
  out = {}
  for method, seeds in runs.items():
    r = seeds[0]["rounds"]
    acc = np.mean([s["test_accuracy"] for s in seeds], 0)
    after = np.asarray(r) > warmup
    entry = {
        "final_accuracy": final(acc, r),
        "final_accuracy_per_seed": [final(s["test_accuracy"], r) for s in seeds],
        "final_train_loss": final(np.mean([s["train_loss"] for s in seeds], 0), r),
        "accuracy_curve": acc.tolist(), "rounds": r,
    }
    if "n_admitted" in seeds[0]:
      adm = np.mean([np.asarray(s["n_admitted"])[after] for s in seeds])
      entry["admitted_per_round"] = float(adm)
      if "n_admitted_aligned" in seeds[0]:
        entry["admitted_aligned_per_round"] = float(np.mean(
            [np.asarray(s["n_admitted_aligned"])[after] for s in seeds]))
      entry["theta_hat"] = float(np.mean([np.asarray(s["theta_term"])[1:] for s in seeds]))
    out[method] = entry
  return out


def claims(name: str, summary: dict, runs: dict, warmup: int) -> list[dict]:
  """The spec's testable forms (§5 T1-T7, §6 assertions) that apply to ``name``."""
  out = []

  def claim(cid, text, ok, value):
    out.append({"id": cid, "claim": text, "holds": bool(ok), "value": value})

  names = list(summary)
  if "local_model" in summary:
    fa, lo = summary["fedalign"], summary["local_model"]
    claim("T3", "FedALIGN's global model beats the local model on the free client's test "
          "mix", fa["final_accuracy"] > lo["final_accuracy"],
          f"{fa['final_accuracy']:.3f} vs {lo['final_accuracy']:.3f}")
    return out
  prio, everyone, align = (summary[n] for n in names)
  r = np.asarray(prio["rounds"])
  curves = {n: np.asarray([s["test_accuracy"] for s in runs[n]]) for n in names}
  early = r <= warmup
  diff = max(float(np.max(np.abs(curves[n][:, early] - curves[names[0]][:, early])))
             for n in names)
  claim("T1a", "all methods identical up to the warm-up", diff == 0.0, f"max diff {diff:.2g}")
  gap = align["final_accuracy"] - prio["final_accuracy"]
  claim("T1b", "final FedALIGN > final priority-only", gap > 0, f"{gap:+.4f}")
  late = r > warmup
  share = float(np.mean(np.asarray(align["accuracy_curve"])[late]
                        >= np.asarray(prio["accuracy_curve"])[late]))
  claim("T1b'", "FedALIGN >= priority-only at most rounds after the warm-up", share > 0.5,
        f"{share:.0%} of evaluations")
  drop = everyone["final_accuracy"] - prio["final_accuracy"]
  claim("T1c", "final all-clients < final priority-only", drop < 0, f"{drop:+.4f}")
  if name.startswith(("fig2", "cpu2")):
    lo = align["final_train_loss"]
    claim("T2", "priority train loss FedALIGN < both baselines",
          lo < min(prio["final_train_loss"], everyone["final_train_loss"]),
          f"{lo:.3f} vs {prio['final_train_loss']:.3f} / {everyone['final_train_loss']:.3f}")
    claim("T2'", "final accuracy FedALIGN > both baselines",
          align["final_accuracy"] > max(prio["final_accuracy"], everyone["final_accuracy"]),
          f"{align['final_accuracy']:.3f} vs {prio['final_accuracy']:.3f} / "
          f"{everyone['final_accuracy']:.3f}")
  if name.startswith("fig4"):
    best = max(prio["final_accuracy"], everyone["final_accuracy"])
    claim("T4", "FedALIGN (FedProx) beats both FedProx baselines",
          align["final_accuracy"] > best, f"{align['final_accuracy']:.4f} vs {best:.4f}")
  if name.startswith("fig5"):
    claim("T5", "final FedALIGN >= priority-only under partial participation", gap >= 0,
          f"{gap:+.4f}")
  if "admitted_aligned_per_round" in align and align["admitted_per_round"] > 0:
    frac = align["admitted_aligned_per_round"] / align["admitted_per_round"]
    claim("S5", "most admitted free clients are aligned (>= 80%)", frac >= 0.8, f"{frac:.0%}")
  claim("T7", "theta_hat in [0, 1], 1 for priority-only, smaller for FedALIGN",
        prio["theta_hat"] == 1.0 and 0 <= align["theta_hat"] <= 1,
        f"{prio['theta_hat']:.3f} / {align['theta_hat']:.3f}")
  return out


def plot(path: str, title: str, runs: dict, warmup: int) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
  for method, seeds in runs.items():
    r = seeds[0]["rounds"]
    for ax, key in zip(axes, ("test_accuracy", "train_loss")):
      v = np.asarray([s[key] for s in seeds])
      ax.plot(r, v.mean(0), label=method)
      ax.fill_between(r, v.min(0), v.max(0), alpha=0.15)
  axes[0].set_ylabel("priority test accuracy")
  axes[1].set_ylabel("priority train loss")
  axes[1].set_yscale("log")
  for ax in axes:
    ax.set_xlabel("round")
    if warmup:
      ax.axvline(warmup, color="gray", ls=":", lw=1)
  acc = np.concatenate([np.asarray([s["test_accuracy"] for s in seeds])[:, 1:].ravel()
                        for seeds in runs.values()])
  axes[0].set_ylim(max(0.0, np.percentile(acc, 2) - 0.05), min(1.0, acc.max() + 0.02))
  axes[0].legend(fontsize=8)
  fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  tmp = path + ".tmp.png"
  fig.savefig(tmp, dpi=110)
  plt.close(fig)
  os.replace(tmp, path)


def flagfile_text(flags_: dict, method: str) -> str:
  lines = [f"--algo={method}"] + [f"--{k}={v}" for k, v in sorted(flags_.items())]
  return "\n".join(lines) + "\n"


def variants(spec: dict):
  """(label, flags) per point of the experiment's sweep (one point without a sweep)."""
  base = dict(COMMON, **spec["flags"])
  if "sweep" not in spec:
    yield "", base
    return
  key, values = spec["sweep"]
  for v in values:
    yield f"{key}={v}", dict(base, **{key: v})


def main(argv):
  del argv
  unknown = [e for e in FLAGS.experiments if e not in EXPERIMENTS]
  if unknown:
    sys.stderr.write(f"error: unknown experiments {unknown}; valid: {', '.join(EXPERIMENTS)}\n")
    return 2
  os.makedirs(FLAGS.out, exist_ok=True)
  if FLAGS.render_only:
    for name in FLAGS.experiments:
      render(name)
    return 0
  seeds = list(range(FLAGS.num_seeds))
  for name in FLAGS.experiments:
    spec = EXPERIMENTS[name]
    record = {"experiment": name, "seeds": seeds, "points": []}
    for label, flags_ in variants(spec):
      t0 = time.time()
      runs = {m: [run_one(dict(flags_, algo=m), s) for s in seeds] for m in spec["methods"]}
      warmup = flags_["warmup_rounds"]
      summary = summarize(runs, warmup)
      found = claims(name, summary, runs, warmup)
      tag = f"{name}{'_' + label.replace('=', '') if label else ''}"
      plot(os.path.join(FLAGS.out, f"{tag}.png"), f"{name} {label}".strip(), runs, warmup)
      record["points"].append({"label": label, "flags": flags_, "summary": summary,
                               "claims": found, "runs": runs})
      print(f"== {name} {label} ({time.time() - t0:.0f}s)")
      for m, e in summary.items():
        extra = (f" admitted {e['admitted_per_round']:.2f} (aligned "
                 f"{e.get('admitted_aligned_per_round', float('nan')):.2f}) theta "
                 f"{e['theta_hat']:.3f}" if "admitted_per_round" in e else "")
        print(f"  {m:22s} final acc {e['final_accuracy']:.4f} "
              f"{[round(x, 3) for x in e['final_accuracy_per_seed']]} train loss "
              f"{e['final_train_loss']:.4f}{extra}")
      for c in found:
        print(f"  {c['id']:5s} {'holds' if c['holds'] else 'FAILS':5s} {c['claim']}: "
              f"{c['value']}")
      if FLAGS.write_flagfiles:
        d = os.path.join("benchmarks", "configs", "fedalign")
        os.makedirs(d, exist_ok=True)
        for m in spec["methods"]:
          with open(os.path.join(d, f"{tag}_{m}.flags"), "w") as f:
            f.write(flagfile_text(flags_, m))
    if "sweep" in spec:
      record["sweep_claim"] = sweep_claim(spec["sweep"][0], record["points"])
    results.atomic_write_json(os.path.join(FLAGS.out, f"{name}.json"), record)
  return 0


def sweep_claim(key: str, points: list[dict]) -> dict:
  """T6: the gain over priority-only shrinks as ``key`` grows, and stays >= 0."""
  gaps = [p["summary"]["fedalign"]["final_accuracy"]
          - p["summary"]["fedavg_priority"]["final_accuracy"] for p in points]
  shrinks, nonneg = gaps[0] > gaps[-1], min(gaps) >= 0
  print(f"  T6    {'holds' if shrinks else 'FAILS'} the gain shrinks as {key} grows; "
        f"{'holds' if nonneg else 'FAILS'} FedALIGN >= priority-only at every point: "
        f"{[round(g, 4) for g in gaps]}")
  return {"id": "T6", "claim": f"the FedALIGN gain shrinks as {key} grows and stays >= 0",
          "gaps": gaps, "shrinks": bool(shrinks), "nonnegative": bool(nonneg),
          "holds": bool(shrinks and nonneg)}


def render(name: str) -> None:
  with open(os.path.join(FLAGS.out, f"{name}.json")) as f:
    record = json.load(f)
  for point in record["points"]:
    runs, label = point["runs"], point["label"]
    warmup = point["flags"]["warmup_rounds"]
    summary = summarize(runs, warmup)
    point["summary"], point["claims"] = summary, claims(name, summary, runs, warmup)
    tag = f"{name}{'_' + label.replace('=', '') if label else ''}"
    plot(os.path.join(FLAGS.out, f"{tag}.png"), f"{name} {label}".strip(), runs, warmup)
    print(f"== {name} {label}")
    for c in point["claims"]:
      print(f"  {c['id']:5s} {'holds' if c['holds'] else 'FAILS'} {c['claim']}: {c['value']}")
  if "sweep" in EXPERIMENTS[name]:
    record["sweep_claim"] = sweep_claim(EXPERIMENTS[name]["sweep"][0], record["points"])
  results.atomic_write_json(os.path.join(FLAGS.out, f"{name}.json"), record)


if __name__ == "__main__":
  app.run(main)
