"""A user's own fine-tuning recipes as candidates: TRL CLI configs and LlamaFactory YAML
turned into CandidateCard proposals (`agent cards import`), and a folder of them decided by
`agent run --cards DIR` beside (or instead of) the library's catalogue."""
