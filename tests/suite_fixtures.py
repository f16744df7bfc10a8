"""Fixtures shared by the whole suite, registered by tests/conftest.py in each process that runs tests: torch's thread
count, a fixed seed per test, and one trained digits checkpoint (built once per session, once per worker under
pytest-xdist)."""

from pathlib import Path

import pytest
import torch

from tests import helpers
from tests.helpers import built_once, digits_test_tensors, shared_root, trained_digits_vit
from tests.inputs import PHOTOS, digit_folder, photo_files, run_main
from vitkit.formats import save_pretrained
from vitkit.utils.hardware import manual_seed

torch.set_num_threads(1)  # (one intra-op thread: tests/conftest.py)


@pytest.fixture(autouse=True)
def _seed() -> None:
    """torch.manual_seed(0) for every test, as vitkit seeds a training step (`vitkit.utils.hardware.manual_seed`:
    without an accelerator, the CPU generator's seed alone)."""
    manual_seed(0)


@pytest.fixture(scope="session", autouse=True)
def _shared_folder(tmp_path_factory) -> None:  # noqa: ANN001
    """Where the workers share what one of them built (`tests.helpers.trained_digits_vit`'s model)."""
    helpers.SHARED[:] = [shared_root(tmp_path_factory)]


@pytest.fixture(scope="session")
def digits_ckpt(tmp_path_factory) -> Path:
    """A small digits model trained well enough that its accuracy means something (about 90%), saved: the one
    trained digits model of the suite (`tests.helpers.trained_digits_vit`, built once per process)."""
    model = trained_digits_vit()
    x, y = digits_test_tensors(model)
    with torch.no_grad():
        assert (model(x).argmax(1) == y).float().mean() > 0.8
    return save_pretrained(model, tmp_path_factory.mktemp("digits") / "model")


@pytest.fixture(scope="session")
def saved_digits(digits_ckpt: Path, tmp_path_factory) -> tuple[Path, Path]:  # noqa: ANN001
    """(`digits_ckpt`, a folder of 100 digit images: the calibration set and the inputs of the int8 tests)."""
    return digits_ckpt, digit_folder(tmp_path_factory.mktemp("digit_images"), list(range(10)), 100)


@pytest.fixture(scope="session")
def photos(tmp_path_factory) -> list[Path]:  # noqa: ANN001
    """`tests.inputs.photo_files` (1.7 CPU s to write: a 2048 x 2048 PNG among them), written once for every worker
    of the session. Read only: a test writes beside them in its own tmp_path."""
    folder = built_once(shared_root(tmp_path_factory), "photos", lambda f: photo_files(f / "img")) / "img"
    return [folder / name for name in PHOTOS]


@pytest.fixture(scope="session")
def digits_openvino_int8(saved_digits: tuple[Path, Path], tmp_path_factory) -> tuple[Path, Path]:  # noqa: ANN001
    """(the trained digits model's OpenVINO IR, its NNCF int8 calibrated on `saved_digits`' 100 images), written by
    `vitkit export --format openvino --precision int8 --calibrate` once for every worker of the session (what it
    printed beside them, stdout.txt): the three NNCF tests of tests/inference/test_export_openvino_int8.py read the
    same one (one export and one quantisation, ~3 CPU s each, instead of two of each). Read only."""

    def build(folder: Path) -> None:
        res = run_main("export", str(saved_digits[0]), "--format", "openvino", "--out", str(folder / "m.xml"),
                       "--precision", "int8", "--calibrate", str(saved_digits[1]))
        assert res.returncode == 0, res.stderr[-2000:]
        (folder / "stdout.txt").write_text(res.stdout)

    folder = built_once(shared_root(tmp_path_factory), "digits_openvino_int8", build)
    return folder / "m.xml", folder / "m.int8.xml"


@pytest.fixture(scope="session")
def bit_digits_run(tmp_path_factory) -> Path:  # noqa: ANN001
    """`vitkit train --config digits_bit`, 80 steps of batch 64 (89.3% test top-1, measured; 100 steps: 92.4% at
    ~1.25x the CPU; 70: 85.1%), run once for every worker of the session (tests/models/test_resnet_bit.py's command
    line, tests/train/test_distill.py's teacher): the folder holding the run (run/) and what the command printed
    (stdout.txt). Read only."""

    def build(folder: Path) -> None:
        res = run_main("train", "--config", "digits_bit", "--out", str(folder / "run"), "--no-progress",
                       *[a for kv in ("schedule.steps=80", "schedule.warmup_steps=8", "train.batch_size=64",
                                      "train.eval_every=0", "train.ckpt_every=0", "data.num_workers=0",
                                      "data.dev_fraction=0", "train.tensorboard=false") for a in ("--set", kv)])
        assert res.returncode == 0, res.stderr[-2000:]
        (folder / "stdout.txt").write_text(res.stdout)

    return built_once(shared_root(tmp_path_factory), "bit_digits_run", build)


@pytest.fixture
def figures_not_encoded(monkeypatch) -> None:  # noqa: ANN001
    """`tests.helpers.figures_drawn_not_encoded` for each test of a module that reads no figure file
    (`pytestmark = pytest.mark.usefixtures("figures_not_encoded")`); session and module fixtures, set up before it,
    keep the real savefig. Nor laid out: these tests read no figure in memory either."""
    helpers.figures_drawn_not_encoded(monkeypatch, laid_out=False)


@pytest.fixture
def figures_not_laid_out(monkeypatch) -> None:  # noqa: ANN001
    """`tests.helpers.figures_not_laid_out` for a test that reads its figure files only as files (written, over a
    size), never where their artists sit."""
    helpers.figures_not_laid_out(monkeypatch)


@pytest.fixture(scope="session")
def preloaded() -> helpers.Preloaded:
    """`tests.helpers.Preloaded`: one interpreter per pytest process that forks the tests' processes of their own
    after their imports, started when a test first asks for it, stopped at the session's end."""
    server = helpers.Preloaded()
    yield server
    server.stop()
