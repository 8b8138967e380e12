"""Scoring: sacrebleu BLEU and chrF (`metrics`), and the attention focus metric (`focus`)."""
