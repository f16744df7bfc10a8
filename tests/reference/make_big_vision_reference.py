"""Write tests/fixtures/big_vision: small ViTs built and run by big_vision's own model code, saved as big_vision saves.

Needs a side environment with jax, flax, numpy and scipy (not vitkit's: no torch needed) and a big_vision checkout:

    python -m venv /tmp/bv && /tmp/bv/bin/pip install "jax[cpu]" flax scipy absl-py
    /tmp/bv/bin/python tests/reference/make_big_vision_reference.py --big-vision /path/to/big_vision

big_vision's `models/vit.py` is imported as is; the two modules it imports for checkpoint handling only
(`big_vision.utils`, `big_vision.models.common`, which pull in TensorFlow) are replaced by empty stand-ins, as the
forward pass does not use them. Parameters are initialised by Flax with non-zero heads, flattened with '/' as
big_vision's `tree_flatten_with_names` names them, and saved with `np.savez`; the outputs (logits, pre-logits, the
encoded tokens) on a fixed input are saved beside them, computed by big_vision's forward pass.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import types
from pathlib import Path

import flax
import jax
import jax.numpy as jnp
import numpy as np

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "big_vision"
# name -> (big_vision model kwargs, key prefix as the checkpoint stores it)
MODELS = {
    "tok_learn": (dict(num_classes=5, patch_size=(8, 8), width=32, depth=2, mlp_dim=64, num_heads=4, posemb="learn",
                       pool_type="tok", head_zeroinit=False), ""),
    "gap_sincos": (dict(num_classes=5, patch_size=(8, 8), width=32, depth=2, mlp_dim=64, num_heads=4,
                        posemb="sincos2d", pool_type="gap", head_zeroinit=False), "params/"),
    "map_learn_img": (dict(num_classes=0, patch_size=(8, 8), width=32, depth=2, mlp_dim=64, num_heads=4,
                           posemb="learn", pool_type="map"), "params/img/"),  # a SigLIP two-tower's image tower
}


def import_vit(repo: Path) -> types.ModuleType:
    for name in ("big_vision", "big_vision.models"):
        sys.modules.setdefault(name, types.ModuleType(name))
    for name in ("big_vision.utils", "big_vision.models.common"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["big_vision"].utils = sys.modules["big_vision.utils"]
    sys.modules["big_vision.models"].common = sys.modules["big_vision.models.common"]
    spec = importlib.util.spec_from_file_location("big_vision.models.vit", repo / "big_vision" / "models" / "vit.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def flatten(tree: dict, prefix: str = "") -> dict[str, np.ndarray]:
    out = {}
    for k in sorted(tree):
        v = tree[k]
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = np.asarray(v, dtype=np.float32)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--big-vision", type=Path, required=True, help="a big_vision checkout (its big_vision/models/vit.py)")
    args = p.parse_args()
    vit = import_vit(args.big_vision)
    OUT.mkdir(parents=True, exist_ok=True)
    x = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype(np.float32)  # NHWC, as big_vision takes it
    outputs = {"x_nchw": x.transpose(0, 3, 1, 2)}
    for i, (name, (kw, prefix)) in enumerate(MODELS.items()):
        model = vit.Model(**kw)
        params = flax.core.unfreeze(model.init(jax.random.PRNGKey(i), jnp.asarray(x))["params"])
        # non-zero class token and probe: a zero-initialised one would hide a wrong placement
        params = jax.tree.map(lambda a, k=i: a + 0.02 * jax.random.normal(jax.random.PRNGKey(100 + k), a.shape), params)
        logits, out = model.apply({"params": params}, jnp.asarray(x))
        flat = flatten(params, prefix)
        np.savez(OUT / f"{name}.npz", **flat)
        outputs[f"{name}_pre_logits"] = np.asarray(out["pre_logits"])
        outputs[f"{name}_encoded"] = np.asarray(out["encoded"])
        if kw["num_classes"]:
            outputs[f"{name}_logits"] = np.asarray(logits)
        print(name, sorted(flat)[:6], "...", len(flat), "arrays")
    np.savez(OUT / "outputs.npz", **outputs)
    made = {"jax": jax.__version__, "flax": flax.__version__, "models": {k: {**v[0], "prefix": v[1]}
                                                                    for k, v in MODELS.items()}}
    (OUT / "made_by.json").write_text(json.dumps(made, indent=2, default=list) + "\n")


if __name__ == "__main__":
    main()
