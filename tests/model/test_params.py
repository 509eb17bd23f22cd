"""Parameter counts of small configs, counted by hand."""

from __future__ import annotations

from servelab.model.params import count_params, layer_params


def test_dense_counts(dense):
    per = layer_params(dense)
    # q 64x64, k and v 64x32, o 64x64
    assert per.attention == 4096 + 2048 + 2048 + 4096
    assert per.dense_mlp == 3 * 64 * 128
    assert per.norms == 2 * 64
    counts = count_params(dense)
    embeddings = 100 * 64
    body = 2 * (12288 + 24576 + 128) + 64  # layers, final norm
    assert counts.total_params == 2 * embeddings + body == 86848
    assert counts.active_params == counts.total_params
    assert counts.active_params_excluding_embeddings == body


def test_tied_embeddings_count_once(dense):
    tied = dense.model_copy(update={"tie_embeddings": True})
    assert count_params(tied).total_params == count_params(dense).total_params - 6400
    assert count_params(tied).total.lm_head == 0


def test_moe_counts(moe):
    counts = count_params(moe)
    expert = 3 * 64 * 32
    assert counts.total.experts == 8 * expert
    assert counts.active.experts == 2 * expert
    assert counts.total.shared_experts == expert
    assert counts.total.router == 8 * 64
    assert counts.total.dense_mlp == 3 * 64 * 128  # layer 0 only
    assert counts.total_params == 12800 + 24576 + 24576 + 8 * expert + expert + 512 + 320
    assert counts.total_params == 118080
    assert counts.active_params == 118080 - 6 * expert == 81216


def test_mla_with_indexer_counts(mla):
    per = layer_params(mla)
    q = 64 * 16 + 16 * 4 * 24  # q_a, q_b over nope + rope
    kv_a = 64 * (32 + 8)
    kv_b = 32 * 4 * (16 + 16)  # latent to nope keys and values
    out = 4 * 16 * 64
    indexer = 16 * 2 * 8 + 64 * 8 + 64 * 2  # wq_b, wk, per-head weights
    assert per.attention == q + kv_a + kv_b + out + indexer
    assert per.norms == 2 * 64 + 32 + 16 + 2 * 8
