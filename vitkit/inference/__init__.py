"""Inference outside training: everything that runs a trained model.

backends.py  the one table of backends (runtime name, export format, file suffix, pip extra, precisions, exporter,
             runner) that the runtime choice, `vitkit export` and the benchmarks read: add a runtime there
runtime.py   `Predictor` / `build_predictor`: the runtime and precision a model runs in, chosen once and logged
export.py    the writers and readers of the deployment files (ONNX, int8, OpenVINO IR, AOTInductor)
evaluate.py  accuracy, the evaluation loader, class-name alignment, exports compared with PyTorch
predict.py   predictions for image files: inputs, top-k rows, CSV / JSONL tables
fewshot.py   few-shot linear evaluation (paper §4.1)
"""
