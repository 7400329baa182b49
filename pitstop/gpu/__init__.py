"""GPU validation: parsers for the real output formats of DCGM diagnostics, NCCL tests and
the CUDA samples, and the judgement of their figures against minimums and baselines."""
