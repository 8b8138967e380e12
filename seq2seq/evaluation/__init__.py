"""Scoring: sacrebleu BLEU and chrF (`metrics`), the attention focus metric (`focus`), and
`decode_and_score`, which decodes a split with a model and scores it with both."""
