"""The data and partition settings (`fedjax_bench.settings`)."""

from fedjax_bench.data import DATASETS, PARTITIONS, QUADRATIC_VARIANTS, natural
from fedjax_bench.data.pfl_synthetic import NOISES
from fedjax_bench.data.priority import TEST_MIXES
from fedjax_bench.data.rotation import CLUSTERS as ROTATION_CLUSTERS
from fedjax_bench.settings import (DIRECTORY, NON_NEGATIVE, POSITIVE, Check, between, section,
                                   setting)

HOLDOUT = Check(lambda v: 0 <= v < 1, "must be in [0, 1)")
# Synthetic(alpha, beta) are standard deviations; features ~ beta overflow float32 near
# 1e38 and their squares (gradient norms) near 1e19: 1e6 keeps every sum finite.
SYNTHETIC_STD = between(0, 10**6)
# A seed keys the generated data (`keys.root`) as 32 bits: 2**32 would be seed 0 again.
SEED_LIMITS = (0, 2**32 - 1)


@section("data and partition")
class DataSettings:
  dataset: str = setting("synthetic", "Dataset.", choices=DATASETS)
  partition: str = setting(None, "How the training set is split over clients (default: the "
                           "dataset's own: natural for synthetic, dirichlet for toyfl, iid for "
                           "image datasets).", choices=(None, "natural", *PARTITIONS))
  alpha: float = setting(0.5, "Dirichlet concentration for --partition=dirichlet (smaller: "
                         "more skewed).", check=POSITIVE)
  shards_per_client: int = setting(2, "Label shards per client for --partition=shards.",
                                   check=POSITIVE)
  partition_seed: int = setting(0, "Seed of the data partition and synthetic data (shared by "
                                "every --seeds run, unless --data_per_seed).",
                                limits=SEED_LIMITS)
  data_per_seed: bool = setting(False, "Each seed s draws its own data randomness: the "
                                "partition, generated data, priority clients and test set "
                                "(prioritized FL), availability phi and asynchronous "
                                "client rates of a one-seed run with --partition_seed="
                                "PARTITION_SEED+s, all seeds still in one program (the examples "
                                "are stored once; each run gets index maps). Off: the seeds "
                                "share one draw from --partition_seed.")
  synthetic_alpha: float = setting(1.0, "LEAF Synthetic(alpha, beta): model heterogeneity.",
                                   check=SYNTHETIC_STD)
  synthetic_beta: float = setting(1.0, "LEAF Synthetic(alpha, beta): data heterogeneity.",
                                  check=SYNTHETIC_STD)
  num_clients: int = setting(100, "Clients in the population.", check=POSITIVE)
  quadratic_variant: str = setting("heterogeneous", "--dataset=quadratic: heterogeneous = "
                                   "AREA's 1/2 (100 i x - 1)^2 over --num_clients clients; "
                                   "two_clients = (x - 1)^2 and (x + 1)^2.",
                                   choices=QUADRATIC_VARIANTS)
  shard_size: int = setting(0, "--partition=noniid|very_noniid|iid_unbalanced: examples per "
                            "label shard (0: 60, 100, 60).", check=NON_NEGATIVE)
  pool_size: int = setting(10000, "--partition=noniid|very_noniid|iid_unbalanced: a seeded "
                           "random subset of this many training examples is partitioned (0: "
                           "all).", check=NON_NEGATIVE)
  num_shards: int = setting(0, "--partition=shards_random: shards (0: num_clients x "
                            "shards_per_client).", check=NON_NEGATIVE)
  num_priority: int = setting(0, "Prioritized FL: priority clients, chosen at random (0: 2 "
                              "for fedalign and its baselines; synth_pfl: 10, gaussmix_shards: "
                              "2). The test set is resampled to their label mix.",
                              check=NON_NEGATIVE)
  test_mix: str = setting("priority", "With --num_priority: the test set's label mix: the "
                          "priority clients', --local_client's, or the official test split as "
                          "it is.", choices=TEST_MIXES)
  synth_noise: str = setting("groups", "synth_pfl: groups (aligned, label-shifted and "
                             "irrelevant free clients) or paper_skew.",
                             choices=NOISES)
  synth_aligned: int = setting(6, "synth_pfl groups: aligned free clients.", check=NON_NEGATIVE)
  label_skew: float = setting(1.5, "synth_pfl paper_skew: label noise skew (0.5, 1.5, 5: low, "
                              "medium, high).", check=POSITIVE)
  random_skew: float = setting(1.5, "synth_pfl paper_skew: irrelevant data skew.",
                               check=POSITIVE)
  holdout_fraction: float = setting(0.0, "Hold out this fraction of each client's examples "
                                    "(seeded by --partition_seed) as its own test data; "
                                    "evaluation then reports the accuracy over clients "
                                    "(client_test_accuracy: mean, std, worst and best 10%) "
                                    "and, for personalized algorithms (ditto), of each "
                                    "client's own model (personal_test_accuracy). 0: none.",
                                    check=HOLDOUT)
  rotation_clusters: int = setting(0, "Planted clusters (IFCA's rotated MNIST, Ghosh et al. "
                                   "2020): client i's images, its training and its own test "
                                   "data, are rotated by (i mod k) x 360/k degrees, k in {2, "
                                   "4}; the central test set is rotated likewise, an equal "
                                   "share per rotation (example j by (j mod k) x 360/k). "
                                   "Square images only. 1: no rotation. 0: off.",
                                   choices=ROTATION_CLUSTERS)
  min_samples: int = setting(1, "Datasets with their own clients (shakespeare, leaf_json, "
                             "tff_h5): a client with fewer training samples is left out (1: "
                             "every client that has any).", check=NON_NEGATIVE,
                             used_if=lambda s: s.dataset in natural.LOADERS)
  test_examples: int = setting(0, "Datasets with their own clients: score the central test "
                               "set (the clients' test samples) on a random subset of this "
                               "many, drawn with --partition_seed (0: all of them).",
                               check=NON_NEGATIVE, used_if=lambda s: s.dataset in natural.LOADERS)
  data_dir: str = setting(None, "TFDS data dir (default $TFDS_DATA_DIR, then TFDS's); for "
                          "leaf_json and tff_h5 the directory of their files.")
  cache_dir: str = setting(None, "Converted-dataset cache (default $FEDJAX_BENCH_CACHE, then "
                           "~/.cache/fedjax_bench).", check=DIRECTORY)

  def load_kwargs(self) -> dict:
    """data.load's arguments but the dataset name and the partition seed."""
    return dict(num_clients=self.num_clients, partition=self.partition, alpha=self.alpha,
                shards_per_client=self.shards_per_client, data_dir=self.data_dir,
                cache_dir=self.cache_dir, synthetic_alpha=self.synthetic_alpha,
                synthetic_beta=self.synthetic_beta, quadratic_variant=self.quadratic_variant,
                shard_size=self.shard_size, pool_size=self.pool_size, num_shards=self.num_shards,
                num_priority=self.num_priority,
                pfl={"noise": self.synth_noise, "num_aligned": self.synth_aligned,
                     "label_skew": self.label_skew, "random_skew": self.random_skew},
                settings=self)
