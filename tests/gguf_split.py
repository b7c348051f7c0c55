"""Split a GGUF file into parts the way ``llama-gguf-split`` does, for the split-model tests.

Every part is a valid GGUF file with ``split.no``/``split.count`` metadata; the first carries the model's
metadata. The gguf package's writer does the splitting (``split_max_tensors``).
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


def split_gguf(src: Path, dest: Path, max_tensors: int) -> list[Path]:
    """Rewrite ``src`` as ``dest``'s stem ``-0000i-of-0000n.gguf`` parts with at most ``max_tensors`` each.

    Returns:
        The parts, in order.
    """
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dest, arch, split_max_tensors=max_tensors)
    for key, f in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = gguf.GGUFValueType(f.types[0])
        sub = gguf.GGUFValueType(f.types[-1]) if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, f.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        writer.add_tensor(
            t.name, np.array(t.data), raw_shape=list(reversed(t.shape.tolist())), raw_dtype=t.tensor_type
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return writer.format_shard_names(dest)
