"""Convert a GGUF checkpoint to a Hugging Face safetensors folder.

usage: python gguf_to_hf.py GGUF_FILE OUT_DIR [--dtype bfloat16]

transformers 5.17+ loads GGUF weights quantized by default and then refuses to
save them; ``GgufConfig(dequantize=True)`` makes them plain tensors first (older
transformers, which SGLang 0.5.17 pins, dequantize on load and have no GgufConfig).
"""

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("gguf", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:  # transformers >= 5.17 loads GGUF weights quantized unless asked to dequantize
        from transformers import GgufConfig

        extra = {"quantization_config": GgufConfig(dequantize=True)}
    except ImportError:  # older ones (SGLang 0.5.17 pins 5.12.1) dequantize on load
        extra = {}

    folder, name = str(args.gguf.parent), args.gguf.name
    dtype = getattr(torch, args.dtype)
    print(f"loading {name} with transformers {transformers.__version__}", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype, **extra)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    # a GGUF tokenizer has no model_max_length (transformers then says 1e30): the model's own
    # context goes there; SGLang's /tokenize returns this figure and cannot serialise 1e30
    context = getattr(model.config, "max_position_embeddings", None)
    if context and not 0 < tokenizer.model_max_length <= 1 << 31:
        tokenizer.model_max_length = int(context)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    # a quick real forward pass: the folder must hold a working model
    ids = tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=4, do_sample=False)
    sample = tokenizer.decode(out[0, ids.shape[1] :])
    (args.out / "specrig-conversion.json").write_text(
        json.dumps(
            {
                "source": name,
                "transformers": transformers.__version__,
                "torch": torch.__version__,
                "dtype": args.dtype,
                "greedy_sample": sample,
            },
            indent=2,
        )
    )
    print(f"converted; greedy sample: {sample!r}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
