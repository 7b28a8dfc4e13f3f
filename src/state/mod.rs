//! Per-sequence state: KV cache, DeltaNet recurrent and conv state. (Being written.)
