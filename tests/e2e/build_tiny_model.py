"""Build a tiny random Llama + byte-level BPE tokenizer locally (no model hub).

    python tests/e2e/build_tiny_model.py OUT_DIR

Recipe: shared/reference/vllm-on-cpu.md (hidden 128, 2 layers, 4 heads / 2 KV heads: head_dim 32,
the smallest the CPU attention backend supports; float32; ~0.4 M parameters, ~1.6 MB). Prints
one JSON line: {"model_dir": ..., "vocab_size": V, "seconds": t}.
"""

from __future__ import annotations

import json
import sys
import time

SENTENCES = [
    "hello world, this is a tiny model for tests.",
    "the quick brown fox jumps over the lazy dog.",
    "fib-runtime dispatches sampling calls to the fastest known kernel.",
    "vllm serves an openai compatible api on the loopback address.",
    "numbers 0 1 2 3 4 5 6 7 8 9 and letters a b c d e f g h i j k l m n o p q r s t u v w x y z.",
]


def build(out_dir: str, seed: int = 0) -> dict:
    t0 = time.time()
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(SENTENCES * 50, trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", bos)])
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                     eos_token="</s>", pad_token="<pad>")
    hf_tok.save_pretrained(out_dir)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(hf_tok), hidden_size=128, intermediate_size=256,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, tie_word_embeddings=False,
                      bos_token_id=bos, eos_token_id=tok.token_to_id("</s>"),
                      pad_token_id=tok.token_to_id("<pad>"), torch_dtype="float32")
    model = LlamaForCausalLM(cfg).to(torch.float32)
    model.save_pretrained(out_dir, safe_serialization=True)
    return {"model_dir": out_dir, "vocab_size": cfg.vocab_size, "seconds": round(time.time() - t0, 2)}


if __name__ == "__main__":
    print(json.dumps(build(sys.argv[1])))
