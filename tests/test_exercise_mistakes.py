"""Every exercise can fail (issue 40, items 4 and 5): each solution, changed into at least two plausible
wrong answers, is run through the chapter's own check cell, which must fail.

A wrong answer is the solution's source with one edit, the way a learner gets it wrong. Nothing replays a
chapter: tests/exercise_harness.py runs an exercise's setup (the earlier cells its answers and check
read, found by slicing the chapter), then the answer, then the check cell. The unedited solution goes
through the same steps and must pass, which proves both that the slice is enough and that an edit
still matches the chapter. A check fails when it raises (never a NameError: that is a slice missing a
name) or when a `Report` it makes is falsy; a check that is one call to a grader of the package must
fail by its report, not by raising.
"""

import os

import pytest
from exercise_harness import EXECUTED, every_exercise, exercise, run, slice_cells

from annotated.data import MULTI30K_ENV

# (notebook, name): [(what the learner got wrong, the text replaced, its replacement), ...]
MISTAKES = {
    ("01_attention_intuition", "my_self_attention"): [
        ("softmax over the queries", "dim=-1", "dim=0"),
        ("keys made with W_q", "X @ W_k", "X @ W_q"),
        (
            "scaled by sqrt(d_k), not asked yet",
            "queries @ keys.T",
            "queries @ keys.T / keys.size(-1) ** 0.5",
        ),
    ],
    ("01_attention_intuition", "my_softmax"): [
        (
            "the maximum not subtracted",
            "scores - scores.max(dim=-1, keepdim=True).values",
            "scores",
        ),
        ("summed over the rows", "exps.sum(dim=-1, keepdim=True)", "exps.sum(dim=0, keepdim=True)"),
        (
            "the whole tensor's maximum subtracted, not each row's",
            "scores.max(dim=-1, keepdim=True).values",
            "scores.max()",
        ),
    ],
    ("01_attention_intuition", "my_hard_lookup"): [
        (
            "argmax keeps the first best key only",
            "scores == scores.max(dim=-1, keepdim=True).values",
            "torch.nn.functional.one_hot(scores.argmax(-1), scores.size(-1)).bool()",
        ),
        (
            "tied values summed, not averaged",
            "best.float() / best.sum(dim=-1, keepdim=True)",
            "best.float()",
        ),
        (
            "best over the queries",
            "scores.max(dim=-1, keepdim=True)",
            "scores.max(dim=0, keepdim=True)",
        ),
    ],
    ("02_scaled_dot_product", "my_attention"): [
        ("no 1/sqrt(d_k)", " / math.sqrt(d_k)", ""),
        ("softmax over the queries", "scores.softmax(dim=-1)", "scores.softmax(dim=-2)"),
        ("mask polarity reversed", "torch.where(mask, scores,", "torch.where(~mask, scores,"),
        ("fully hidden rows left uniform", "weights = weights.masked_fill(~mask, 0.0)", "pass"),
    ],
    ("02_scaled_dot_product", "my_bias_attention"): [
        (
            "fully hidden rows left uniform",
            "weights = weights.masked_fill(~mask, 0.0)  # so its weights are set to zero",
            "pass",
        ),
        ("the bias subtracted", "scores = scores + bias", "scores = scores - bias"),
        ("sqrt(d_v) as the scale", "math.sqrt(query.size(-1))", "math.sqrt(value.size(-1))"),
        (  # finite output, NaN gradients (chapter 03): the grader backpropagates through that row
            "the textbook bias of -inf",
            "hidden = torch.finfo(scores.dtype).min",
            'hidden = float("-inf")',
        ),
    ],
    ("03_masks", "my_causal_mask"): [
        (
            "the future visible",
            "position[None, :] <= position[:, None]",
            "position[None, :] >= position[:, None]",
        ),
        (
            "the diagonal hidden",
            "position[None, :] <= position[:, None]",
            "position[None, :] < position[:, None]",
        ),
    ],
    ("03_masks", "my_padding_mask"): [
        ("pads marked True", "tokens.ne(pad_id)", "tokens.eq(pad_id)"),
        ("the pad id fixed at 0", "tokens.ne(pad_id)", "tokens.ne(0)"),
        (
            "a float mask",
            "return is_real.unsqueeze(1).unsqueeze(2)",
            "return is_real.unsqueeze(1).unsqueeze(2).float()",
        ),
    ],
    ("03_masks", "my_packed_mask"): [
        ("the future visible", "same & real & causal_mask(segments.size(1))[0]", "same & real"),
        ("sentences see each other", "same & real & causal_mask", "real & causal_mask"),
        ("padding attends to padding", "same & real & causal_mask", "same & causal_mask"),
    ],
    ("04_multi_head_attention", "my_head_outputs"): [
        (
            "W^O's blocks cut from its rows",
            "mha.W_o.weight.T.unflatten",
            "mha.W_o.weight.unflatten",
        ),
        ("the mask not passed on", "attention(q, k, v, mask)", "attention(q, k, v)"),
        ("keys projected with W_q", "mha.W_k(key)", "mha.W_q(key)"),
    ],
    ("04_multi_head_attention", "MyMultiHeadAttention"): [
        (
            "heads split across positions",
            "x.unflatten(-1, (self.n_heads, -1)).transpose(1, 2)",
            "x.reshape(x.size(0), self.n_heads, x.size(1), -1)",
        ),
        ("keys projected with W_q", "project(key, 1)", "project(key, 0)"),
        (
            "heads merged without transposing back",
            "heads.transpose(1, 2).flatten(2)",
            "heads.flatten(2).reshape(heads.size(0), heads.size(2), -1)",
        ),
    ],
    ("04_multi_head_attention", "my_head_weights"): [
        ("scaled by sqrt(d_model)", "/ mha.d_k**0.5", "/ mha.d_model**0.5"),
        (
            "the mask forgotten",
            "scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)",
            "pass",
        ),
        ("softmax over the queries", "scores.softmax(dim=-1)", "scores.softmax(dim=-2)"),
    ],
    ("05_positional_encoding", "my_encoding"): [
        ("sin and cos swapped", "[angle.sin(), angle.cos()]", "[angle.cos(), angle.sin()]"),
        ("frequency from the column index", "-two_i * math.log", "-two_i * 2 * math.log"),
    ],
    ("05_positional_encoding", "my_shift_matrix"): [
        ("turned the other way", "theta = delta * angular", "theta = -delta * angular"),
        ("turned by delta + 1", "theta = delta * angular", "theta = (delta + 1) * angular"),
        (
            "sine and cosine columns swapped",
            "torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)",
            "torch.arange(1, d_model, 2), torch.arange(0, d_model, 2)",
        ),
    ],
    ("05_positional_encoding", "my_shift"): [
        (
            "turned the other way",
            "s * cos + c * sin, c * cos - s * sin",
            "s * cos - c * sin, c * cos + s * sin",
        ),
        ("halves, not pairs, put back", "], dim=-1)", "], dim=-2)"),
        ("pairs taken as the two halves", "x[..., 0::2], x[..., 1::2]", "x.chunk(2, dim=-1)"),
    ],
    ("06_embeddings", "MyEmbeddings"): [
        ("not scaled", "return self.table(tokens) * self.scale", "return self.table(tokens)"),
        ("scaled by d_model", "self.scale = math.sqrt(d_model)", "self.scale = d_model"),
    ],
    ("06_embeddings", "my_tie_all"): [
        (
            "a copy",
            "model.generator.weight = table  #",
            "model.generator.weight = nn.Parameter(table.detach().clone())  #",
        ),
        ("the source table left apart", "model.src_embed.lut.weight = table  #", "pass  #"),
        (
            "the output weight transposed",
            "model.generator.weight = table  #",
            "model.generator.weight = nn.Parameter(table.T)  #",
        ),
    ],
    ("06_embeddings", "my_init_"): [
        ("PyTorch's N(0, 1)", "std=table.embedding_dim**-0.5", "std=1.0"),
        (
            "the variance 1/D given as the std",
            "std=table.embedding_dim**-0.5",
            "std=1 / table.embedding_dim",
        ),
        ("scaled by the vocabulary", "table.embedding_dim**-0.5", "table.num_embeddings**-0.5"),
        (
            "a uniform fill of the right spread",
            "nn.init.normal_(table.weight, mean=0.0, std=table.embedding_dim**-0.5)",
            "nn.init.uniform_(table.weight, -((3 / table.embedding_dim) ** 0.5), (3 / table.embedding_dim) ** 0.5)",
        ),
        (
            "a constant fill",
            "nn.init.normal_(table.weight, mean=0.0, std=table.embedding_dim**-0.5)",
            "nn.init.constant_(table.weight, table.embedding_dim**-0.5)",
        ),
        (
            "a new Parameter, not filled in place",
            "nn.init.normal_(table.weight, mean=0.0, std=table.embedding_dim**-0.5)",
            "table.weight = nn.Parameter(torch.randn_like(table.weight) * table.embedding_dim**-0.5)",
        ),
        (
            "new memory under the same Parameter",
            "nn.init.normal_(table.weight, mean=0.0, std=table.embedding_dim**-0.5)",
            "table.weight.data = torch.randn_like(table.weight) * table.embedding_dim**-0.5",
        ),
    ],
    ("07_add_and_norm", "MyRMSNorm"): [
        (
            "the mean subtracted",
            "mean_square = x.pow(2)",
            "x = x - x.mean(-1, keepdim=True)\n        mean_square = x.pow(2)",
        ),
        (
            "divided by the norm",
            "x.pow(2).mean(-1, keepdim=True)",
            "x.pow(2).sum(-1, keepdim=True)",
        ),
        (
            "a bias added",
            "self.weight = nn.Parameter(torch.ones(d_model))",
            "self.weight = nn.Parameter(torch.ones(d_model))\n        self.bias = nn.Parameter(torch.zeros(d_model))",
        ),
    ],
    ("07_add_and_norm", "MySublayerConnection"): [
        (
            "dropout on the sum",
            "total = x + self.drop(sublayer(inner))",
            "total = self.drop(x + sublayer(inner))",
        ),
        (
            "pre-LN normalises the sum too",
            "return total if self.norm_first else self.norm(total)",
            "return self.norm(total)",
        ),
        (
            "the residual from the normalised input",
            "total = x + self.drop",
            "total = inner + self.drop",
        ),
        ("the rate fixed at 0.1", "self.drop = nn.Dropout(dropout)", "self.drop = nn.Dropout(0.1)"),
    ],
    ("07_add_and_norm", "MyStdPlusEps"): [  # the check: the prediction holds for the module written
        (
            "eps inside the root",
            "centred / (sigma + self.eps)",
            "centred / (sigma**2 + self.eps).sqrt()",
        ),
        (
            "the unbiased std",
            "centred.pow(2).mean(-1, keepdim=True).sqrt()",
            "x.std(-1, keepdim=True)",
        ),
    ],
    ("08_feed_forward", "my_unit_outputs"): [
        ("no ReLU", "torch.relu(ffn.w_1(x))", "ffn.w_1(x)"),
        ("W_2 not transposed", "ffn.w_2.weight.T", "ffn.w_2.weight"),
        ("b_1 left out", "torch.relu(ffn.w_1(x))", "torch.relu(x @ ffn.w_1.weight.T)"),
    ],
    ("08_feed_forward", "MyFunctionalFeedForward"): [
        (
            "no biases b_1, b_2",
            "nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model), dropout",
            "nn.Linear(d_model, d_ff, bias=False), nn.Linear(d_ff, d_model, bias=False), dropout",
        ),
        ("the mode forgotten", ", training=self.training", ""),
        (
            "the keep probability as the rate",
            "dropout(hidden, self.p,",
            "dropout(hidden, 1 - self.p,",
        ),
    ],
    ("08_feed_forward", "MyConvFeedForward"): [
        ("a kernel of 3", "kernel_size=1)  # weight (d_ff, D, 1)", "kernel_size=3, padding=1)"),
        ("no ReLU", "torch.relu(self.conv_1(x.transpose(1, 2)))", "self.conv_1(x.transpose(1, 2))"),
        (
            "no transpose on the way out",
            "return self.conv_2(hidden).transpose(1, 2)",
            "return self.conv_2(hidden)",
        ),
    ],
    ("09_encoder", "MyEncoderLayer"): [
        (
            "no dropout before the residual sums",
            "self.dropout = nn.Dropout(dropout)",
            "self.dropout = nn.Identity()",
        ),
        (
            "the rate fixed at 0.5",
            "self.dropout = nn.Dropout(dropout)",
            "self.dropout = nn.Dropout(0.5)",
        ),
        (
            "no residual around the attention",
            "self.norm_1(x + self.dropout(",
            "self.norm_1(0 + self.dropout(",
        ),
        ("the mask not passed on", "self.self_attn(x, x, x, mask)", "self.self_attn(x, x, x)"),
        (
            "pre-LN",
            "x = self.norm_1(x + self.dropout(self.self_attn(x, x, x, mask)))",
            "x = x + self.self_attn(*[self.norm_1(x)] * 3, mask)",
        ),
    ],
    ("09_encoder", "my_copy_from_torch"): [
        ("W_q and W_k swapped", "(attn.W_q, attn.W_k, attn.W_v)", "(attn.W_k, attn.W_q, attn.W_v)"),
        ("the blocks transposed", "linear.weight.copy_(weight)", "linear.weight.copy_(weight.T)"),
        (
            "norm2 into the first sub-layer",
            "sublayers[0].norm.load_state_dict(theirs.norm1",
            "sublayers[0].norm.load_state_dict(theirs.norm2",
        ),
    ],
    ("09_encoder", "MyPreLNEncoder"): [
        ("no final LayerNorm", "return self.norm(x)", "return x"),
        ("post-LN layers", "dropout, norm_first=True)", "dropout)"),
        ("the mask not passed on", "x = layer(x, mask)", "x = layer(x)"),
    ],
    ("10_decoder", "MyDecoderLayer"): [
        (
            "no dropout before the residual sums",
            "self.dropout = nn.Dropout(dropout)",
            "self.dropout = nn.Identity()",
        ),
        (
            "encoder-decoder attention reads x",
            "self.cross_attn(x, memory, memory, src_mask)",
            "self.cross_attn(x, x, x, tgt_mask)",
        ),
        (
            "no residual connections",
            "x = norm(x + self.dropout(sublayer(x)))",
            "x = norm(self.dropout(sublayer(x)))",
        ),
        (
            "the two attentions swapped",
            "lambda x: self.self_attn(x, x, x, tgt_mask),  # the target prefix",
            "lambda x: self.cross_attn(x, memory, memory, src_mask),",
        ),
    ],
    ("10_decoder", "my_cross_weights"): [
        ("queries from x, before the self-attention", "attn.W_q(state)", "attn.W_q(x)"),
        ("scaled by sqrt(d_model)", "/ attn.d_k**0.5", "/ attn.d_model**0.5"),
        (
            "the source pads not hidden",
            "scores = scores.masked_fill(~src_mask, torch.finfo(scores.dtype).min)",
            "pass",
        ),
    ],
    ("10_decoder", "my_decode_one_at_a_time"): [
        ("the prefix one short", "prefix = x[:, : t + 1]", "prefix = x[:, :t]"),
        ("the first position kept", "[:, -1])  # (B, D)", "[:, 0])  # (B, D)"),
        ("no causal mask on the prefix", "causal_mask(t + 1)", "None"),
        (
            "one call on the whole sequence",
            "    outputs = []\n",
            "    return decoder(x, memory, src_mask, causal_mask(x.size(1)))\n    outputs = []\n",
        ),
    ],
    ("10_decoder", "my_alignment"): [
        ("no 1/sqrt(d_k)", "Q @ K.T / 2", "Q @ K.T"),
        ("softmax over the targets", "scores.softmax(-1)", "scores.softmax(0)"),
        (
            "the pad not hidden",
            'scores[:, SOURCE.index("<pad>")] = torch.finfo(scores.dtype).min',
            "pass",
        ),
    ],
    ("11_model", "MySharedTransformer"): [
        (
            "the look-ahead mask not passed on",
            "memory, src_mask, tgt_mask)",
            "memory, src_mask, None)",
        ),
        (
            "the encoder layer applied once",
            "for _ in range(self.n_layers):\n            memory",
            "for _ in range(1):\n            memory",
        ),
        (
            "no source mask in the encoder",
            "self.encoder_layer(memory, src_mask)",
            "self.encoder_layer(memory, None)",
        ),
    ],
    ("11_model", "my_parameter_count"): [
        ("one LayerNorm per encoder layer", "feed_forward + 2 * norm", "feed_forward + norm"),
        (
            "one attention per decoder layer",
            "decoder_layer = 2 * attention",
            "decoder_layer = attention",
        ),
        (
            "the generator's bias forgotten",
            "(encoder_layer + decoder_layer) + vocab",
            "(encoder_layer + decoder_layer)",
        ),
        ("the shared table counted three times", "return vocab * d", "return 3 * vocab * d"),
    ],
    ("11_model", "my_tie_weights"): [
        (
            "a copy of the table",
            "model.src_embed.lut.weight = shared",
            "model.src_embed.lut.weight = nn.Parameter(shared.clone())",
        ),
        ("the generator left untied", "model.generator.weight = shared", "pass"),
    ],
    ("12_training", "my_peak_lr"): [
        ("warm-up off by one", "step / warmup", "(step - 1) / warmup"),
        (
            "1/step after the warm-up, not its square root",
            "(warmup / step) ** 0.5",
            "warmup / step",
        ),
        ("max for min", "peak * min(", "peak * max("),
        ("only step 0 refused: step -3 goes on", "if step < 1:", "if step == 0:"),
        ("no refusal: step 0 divides by zero", "if step < 1:", "if False:"),
    ],
    ("12_training", "MyLabelSmoothing"): [
        ("the pad column kept", " - log_p[..., self.pad_id]", ""),
        ("epsilon over all classes", "(self.vocab_size - 2)", "(self.vocab_size)"),
        ("padded positions scored", ".masked_fill(target == self.pad_id, 0.0)", ""),
    ],
    ("13_copy_task", "my_greedy_decode"): [
        (
            "the source's padding mask dropped",
            "memory = model.encode(src, src_mask)  # (B, S, D)",
            "src_mask = None\n    memory = model.encode(src, src_mask)  # (B, S, D)",
        ),
        ("pad allowed as an answer", 'logits[:, pad_id] = float("-inf")', "pass"),
        ("finished sentences keep writing", ".masked_fill(done, pad_id)", ""),
    ],
    ("13_copy_task", "my_copy_target"): [
        ("EOS one late", "lengths + 1] = eos_id", "lengths + 2] = eos_id"),
        (
            "EOS at the end of the row",
            "tgt[torch.arange(B), lengths + 1] = eos_id",
            "tgt[:, -1] = eos_id",
        ),
        ("no BOS", "tgt[:, 0] = bos_id", "pass"),
        ("the book's BOS written as a number", "tgt[:, 0] = bos_id", "tgt[:, 0] = 1"),
    ],
    ("13_copy_task", "my_average_weights"): [
        (
            "the last snapshot only",
            "torch.stack([s[name] for s in states]).mean(0)",
            "states[-1][name]",
        ),
        ("summed, not averaged", ".mean(0)", ".sum(0)"),
    ],
    ("14_decoding", "my_next_token_logits"): [
        ("the first position read", "states[:, -1]", "states[:, 0]"),
        (
            "log-probabilities, not logits",
            "return model.generator(states[:, -1])",
            "return model.generator(states[:, -1]).log_softmax(-1)",
        ),
    ],
    ("14_decoding", "my_cached_greedy"): [
        (
            "the source's padding mask dropped",
            "memory, cache = model.encode(src, src_mask), DecoderCache()",
            "src_mask = None\n    memory, cache = model.encode(src, src_mask), DecoderCache()",
        ),
        ("pad allowed as an answer", 'logits[:, pad_id] = float("-inf")', "pass"),
        ("finished sentences keep writing", ".masked_fill(done, pad_id)", ""),
        (
            "no cache: the whole prefix every step",
            "next_token_logits(model, memory, src_mask, ys, cache)",
            "next_token_logits(model, memory, src_mask, ys)",
        ),
    ],
    ("14_decoding", "my_follow_beams"): [
        (
            "no sentence offset",
            "torch.arange(B)[:, None] * n_beam + picked // n_vocab",
            "picked // n_vocab",
        ),
        (
            "parent from dividing by n_beam",
            "n_beam + picked // n_vocab",
            "n_beam + picked // n_beam",
        ),
        (
            "keys moved, values left",
            "kv.k, kv.v = kv.k.index_select(0, rows), kv.v.index_select(0, rows)",
            "kv.k = kv.k.index_select(0, rows)",
        ),
        (
            "only the first layer moved",
            "for layer in cache.layers:",
            "for layer in cache.layers[:1]:",
        ),
    ],
    ("15_beam_search", "my_length_penalty"): [
        ("divided by 5", "(5 + length.float()) / 6", "(5 + length.float()) / 5"),
        ("alpha as a factor", "6) ** alpha\n", "6) * alpha\n"),
        ("the length off by one", "(5 + length.float())", "(6 + length.float())"),
    ],
    ("15_beam_search", "my_score"): [
        ("padding scored", "(token_log_p * real).sum(-1)", "token_log_p.sum(-1)"),
        ("the labels not shifted", "ys[:, 1:, None]", "ys[:, :-1, None]"),
        ("no length penalty", " / length_penalty(real.sum(-1), alpha)", ""),
    ],
    ("15_beam_search", "my_beam_step"): [
        (
            "the parent's log P not added",
            "log_p + float(log_probs[i, token])",
            "float(log_probs[i, token])",
        ),
        ("no length penalty", "log_p / float(length_penalty(len(tokens), alpha))", "log_p"),
        (
            "the penalty of the parent's length",
            "length_penalty(len(tokens), alpha)",
            "length_penalty(len(tokens) - 1, alpha)",
        ),
        (
            "a finished hypothesis kept as a live beam",
            "return [c for c in candidates if c[0][-1] != eos_id][:beam_size]",
            "return candidates[:beam_size]",
        ),
        (
            "endings taken from the 2 * beam_size best (tensor2tensor's rule, not the exercise's)",
            "for tokens, log_p in candidates[:beam_size]:",
            "for tokens, log_p in candidates[: 2 * beam_size]:",
        ),
    ],
    ("16_translation", "my_tokens_per_word"): [
        (
            "the vocabulary size not passed on",
            "train_tokenizer(train, vocab_size=vocab_size)",
            "train_tokenizer(train)",
        ),
        (
            "trained on the validation split",
            "train_tokenizer(train,",
            'train_tokenizer(splits["val"],',
        ),
        (
            "the words of the German side only",
            "len(p.src.split()) + len(p.tgt.split())",
            "len(p.src.split())",
        ),
        ("words per token", "return n_tokens / n_words", "return n_words / n_tokens"),
    ],
    ("16_translation", "my_length_batches"): [
        (
            "the newcomer's length only",
            "* max(grown) > max_tokens",
            "* max(lengths[i]) > max_tokens",
        ),
        (
            "the batch's size before adding",
            "(len(batch) + 1) * max(grown)",
            "len(batch) * max(grown)",
        ),
        (
            "the last batch forgotten",
            "return batches + [batch] if batch else batches",
            "return batches",
        ),
        (
            "tokens counted, not the padded rectangle",
            "(len(batch) + 1) * max(grown)",
            "sum(max(lengths[j]) for j in batch + [i])",
        ),
    ],
    ("17_reading_the_model", "my_translate_without_penalty"): [
        ("alpha left at 0.6", "4, 0.0, torch", "4, 0.6, torch"),
        ("greedy, not 4 beams", "4, 0.0, torch", "1, 0.0, torch"),
        (
            "the text, not the ids",
            'return translate_ids(model, sources, 4, 0.0, torch.device("cpu"))',
            'return [decode(run_tok, ids) for ids in translate_ids(model, sources, 4, 0.0, torch.device("cpu"))]',
        ),
    ],
    ("18_ablations", "my_bleu_directions"): [
        ("dropout helps even here", '"D-dropout-0": +1', '"D-dropout-0": -1'),
        ("one head as good as eight", '"A-heads-1": -1', '"A-heads-1": 0'),
        ("label smoothing costs BLEU", '"D-smoothing-0": 0', '"D-smoothing-0": -1'),
    ],
    ("18_ablations", "my_perplexity_order"): [
        (
            "the paper's base first",
            '["pre-LN", "C-layers-1", "base"',
            '["base", "pre-LN", "C-layers-1"',
        ),
        ("one head below no scale", '"A-heads-1", "no-scale"]', '"no-scale", "A-heads-1"]'),
    ],
    ("19_look_ahead_experiment", "my_peek_mask"): [
        ("one further ahead", "tril(diagonal=delta)", "tril(diagonal=delta + 1)"),
        (
            "the padding forgotten",
            "padding_mask(tgt_in, pad_id) & up_to_delta_ahead",
            "up_to_delta_ahead.expand(tgt_in.size(0), 1, T, T)",
        ),
        ("the upper triangle", ".tril(diagonal=delta)", ".triu(diagonal=-delta)"),
    ],
    ("20_norm_placement_experiment", "my_train"): [
        (
            "the chapter's FACTOR kept, so the peak is ignored",
            "factor = peak / noam_lr(WARMUP, D_MODEL, WARMUP)",
            "factor = FACTOR",
        ),
        (
            "the peak given as the factor",
            "factor = peak / noam_lr(WARMUP, D_MODEL, WARMUP)",
            "factor = peak",
        ),
        (
            "the schedule without warm-up",
            "make_scheduler(optimizer, D_MODEL, WARMUP, factor)",
            "make_scheduler(optimizer, D_MODEL, WARMUP, factor, hold_peak=True)",
        ),
        ("the data's seed not offset", "seed=100 + seed", "seed=seed"),
    ],
}

FAILED_WHEN = {  # a check that prints its verdict rather than raising: the verdict, read after the cell
    ("07_add_and_norm", "MyStdPlusEps"): "not held",
}
# exercises whose setup or check takes more than a few seconds (training, tokenizers, a trained model)
SLOW = {
    ("13_copy_task", "my_average_weights"),  # trains the copy model (the check reads its snapshots)
    ("16_translation", "my_tokens_per_word"),  # trains tokenizers of 1,000 to 32,000 tokens
    ("16_translation", "my_length_batches"),  # trains the chapter's tokenizer, encodes Multi30k
    ("17_reading_the_model", "my_translate_without_penalty"),  # beam search with the trained model
    ("19_look_ahead_experiment", "my_peek_mask"),  # trains the copy model with and without the mask
    ("20_norm_placement_experiment", "my_train"),  # the check trains five copy models
}


def wrong_answers(notebook: str, name: str) -> tuple[str, ...]:
    """Every listed wrong answer's source: the setup makes what any of them reads too."""
    source = exercise(notebook, name).solution
    return tuple(source.replace(old, new) for _, old, new in MISTAKES[notebook, name])


def graded(notebook: str, name: str, source: str):
    """How the check failed on `source` (or None), after the setup that all the answers share."""
    failed_when = FAILED_WHEN.get((notebook, name), "")
    return run(notebook, name, source, wrong_answers(notebook, name), failed_when)


def marks(notebook: str, name: str) -> list:
    return [pytest.mark.slow] if (notebook, name) in SLOW else []


EXERCISES = [pytest.param(nb, name, id=name, marks=marks(nb, name)) for nb, name in MISTAKES]
CASES = [
    pytest.param(nb, name, *m, id=f"{name}-{m[0]}", marks=marks(nb, name))
    for (nb, name), ms in MISTAKES.items()
    for m in ms
]


@pytest.fixture(autouse=True)
def multi30k(request):
    """Chapters 16 and 17 read Multi30k: the folder conftest finds (skipped where there is none).
    Chapter 17 translates with a trained model, on one thread (as chapter 20 trains)."""
    callspec = getattr(request.node, "callspec", None)  # None: a test of no one notebook
    if callspec and callspec.params["notebook"].startswith(("16_", "17_")):
        os.environ.setdefault(MULTI30K_ENV, str(request.getfixturevalue("data_dir")))
    if callspec and callspec.params["notebook"].startswith("17_"):
        request.getfixturevalue("one_thread")


@pytest.fixture(scope="module", autouse=True)
def cells_executed():
    """Say how many chapter cells the module executed (seen with `pytest -s`)."""
    yield
    print(f"\nexercise mistakes: code cells executed {dict(EXECUTED)}")


def test_each_exercise_has_at_least_two_mistakes():
    assert all(len(ms) >= 2 for ms in MISTAKES.values())


def test_every_exercise_in_the_book_is_fed_wrong_answers():
    exercises = every_exercise()
    assert not MISTAKES.keys() - exercises, (
        f"no such exercise: {sorted(MISTAKES.keys() - exercises)}"
    )
    assert not exercises - MISTAKES.keys(), (
        f"no wrong answers for {sorted(exercises - MISTAKES.keys())}"
    )


@pytest.mark.parametrize("notebook, name", EXERCISES)
def test_the_solution_itself_passes(notebook, name):
    assert graded(notebook, name, exercise(notebook, name).solution) is None


@pytest.mark.parametrize("notebook, name, mistake, old, new", CASES)
def test_a_wrong_answer_fails_the_check(notebook, name, mistake, old, new):
    ex = exercise(notebook, name)
    assert ex.solution.count(old) == 1, (
        f"{name}: the edit '{mistake}' no longer matches the solution"
    )
    failure = graded(notebook, name, ex.solution.replace(old, new))
    assert failure, f"{name} with {mistake} passes"
    if ex.graded:  # a grader reports a wrong answer; it does not raise on one
        assert failure.how == "report", f"{name} with {mistake}: the grader raised {failure.why}"


# Right answers written otherwise than the solution: each must pass its check.
RIGHT_ANSWERS = {
    ("14_decoding", "my_follow_beams"): [
        (
            "only the self-attention's cache moved, which the exercise allows",
            "for kv in layer:",
            "for kv in layer[:1]:",
        ),
    ],
    ("07_add_and_norm", "MySublayerConnection"): [
        (
            "the package's Dropout",
            "self.drop = nn.Dropout(dropout)",
            "self.drop = Dropout(dropout)",
        ),
        (
            "functional dropout",
            "x + self.drop(sublayer(inner))",
            "x + nn.functional.dropout(sublayer(inner), self.drop.p, self.training)",
        ),
    ],
    ("06_embeddings", "my_init_"): [
        (
            "normal_ on the weight, without autograd",
            "nn.init.normal_(table.weight, mean=0.0, std=table.embedding_dim**-0.5)",
            "with torch.no_grad():\n        table.weight.normal_(0.0, table.embedding_dim**-0.5)",
        ),
        (
            "standard normals copied in, divided by sqrt(D)",
            "nn.init.normal_(table.weight, mean=0.0, std=table.embedding_dim**-0.5)",
            "with torch.no_grad():\n"
            "        table.weight.copy_(torch.randn_like(table.weight) / math.sqrt(table.embedding_dim))",
        ),
    ],
}
RIGHT = [
    pytest.param(nb, name, *r, id=f"{name}-{r[0]}", marks=marks(nb, name))
    for (nb, name), rs in RIGHT_ANSWERS.items()
    for r in rs
]


@pytest.mark.parametrize("notebook, name, variant, old, new", RIGHT)
def test_a_right_answer_passes_the_check(notebook, name, variant, old, new):
    source = exercise(notebook, name).solution
    assert source.count(old) == 1, f"{name}: the edit '{variant}' no longer matches the solution"
    answer = source.replace(old, new)
    failed_when = FAILED_WHEN.get((notebook, name), "")
    failure = run(notebook, name, answer, (*wrong_answers(notebook, name), answer), failed_when)
    assert failure is None, f"{name} written as '{variant}' fails: {failure}"


def test_the_slice_keeps_the_cells_that_make_what_is_read():
    cells = [
        "import torch",  # 0: torch, read by what is kept
        "x = torch.zeros(3)",  # 1: binds x
        "print(x)",  # 2: only reads
        "fig = draw(x)",  # 3: binds a name nobody reads
        "x.add_(1)",  # 4: changes x in place
        "y = 2",  # 5: y is rebound below before anyone reads it
        "def f():\n    return z",  # 6: reads z when called, and z comes after
        "z, y = x + 1, 3",  # 7
    ]
    assert slice_cells(cells, {"y"}) == [0, 1, 4, 7]
    assert slice_cells(cells, {"f"}) == [0, 1, 4, 6, 7]
