"""Scoring: sacrebleu BLEU and chrF (`metrics`), attention against word alignments (`aer`), and
`decode_and_score`, which decodes a split with a model and scores it with both."""
