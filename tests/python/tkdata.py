"""A small, known training job written through the Writer, for the query tests.

Global steps and modes (one worker, ended with end_of_training):

    global  0 1 2 3 4 | 5 6 | 7 8 | 9
    mode    TRAIN     | EVAL| TRAIN| PREDICT
    mode st 0 1 2 3 4 | 0 1 | 5 6 | 0

Tensors:
    layer1.weight  float32 (3, 4), every step, collection "weights"
    layer1.bias    float64 (4,), every step, collection "biases"
    loss           float32 scalar, every step, collection "losses"
    gradient/layer1.weight  float32 (3, 4), TRAIN steps only, "gradients"
    acts           reductions only (mean, abs max), global steps 0-4, "activations"
"""

from typing import Dict, List, Tuple

import numpy as np

from tensorkeep import Writer, modes

MODES: List[Tuple[int, int, int]] = [  # (global step, mode, mode step)
    (0, modes.TRAIN, 0),
    (1, modes.TRAIN, 1),
    (2, modes.TRAIN, 2),
    (3, modes.TRAIN, 3),
    (4, modes.TRAIN, 4),
    (5, modes.EVAL, 0),
    (6, modes.EVAL, 1),
    (7, modes.TRAIN, 5),
    (8, modes.TRAIN, 6),
    (9, modes.PREDICT, 0),
]
NAMES = sorted(["layer1.weight", "layer1.bias", "loss", "gradient/layer1.weight", "acts"])


def value(name: str, step: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * step + sum(name.encode()))
    if name == "layer1.bias":
        return rng.standard_normal(4)
    if name == "loss":
        return np.float32(1.0 / (step + 1))
    return rng.standard_normal((3, 4)).astype(np.float32)


def acts_reductions(step: int) -> Dict[Tuple[str, bool], float]:
    return {("mean", False): 0.25 * step, ("max", True): 1.5 + step}


def write_job(url: str, end_of_training: bool = True) -> None:
    w = Writer(url, worker="worker_0", num_workers=1)
    for g, mode, ms in MODES:
        w.write_tensor("layer1.weight", value("layer1.weight", g), g, mode, ms, collections=("weights",))
        w.write_tensor("layer1.bias", value("layer1.bias", g), g, mode, ms, collections=("biases",))
        w.write_tensor("loss", value("loss", g), g, mode, ms, collections=("losses",))
        if mode == modes.TRAIN:
            w.write_tensor(
                "gradient/layer1.weight", value("gradient/layer1.weight", g), g, mode, ms, collections=("gradients",)
            )
        if g < 5:
            w.write_tensor("acts", None, g, mode, ms, collections=("activations",), reductions=acts_reductions(g))
        w.end_step(g)
    w.close(end_of_training=end_of_training)
