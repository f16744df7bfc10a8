"""Inference outside training: evaluation (`evaluate`), few-shot linear probes (`fewshot`), predictions for image
files (`predict`), the runtimes that serve a model (`runtime`) and the deployment files they run (`export`)."""
