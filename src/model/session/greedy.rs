//! Plain greedy generation, with the decode steps pipelined where the backend can queue runs
//! ([`Backend::pipelines`]): the step after the next is submitted before the next one's token
//! is read back, its token taken from that step's argmax on the device, so the device runs
//! step after step without waiting for the host.

use super::{Session, StepOutput};
use crate::backend::{Backend, Feed, HostData};
use crate::model::ModelError;
use crate::model::qwen35::{GraphOptions, LogitRows};

/// Decode steps in flight at most (one running, one queued behind it).
const DEPTH: usize = 2;

fn greedy_opts() -> GraphOptions {
    GraphOptions {
        logits: LogitRows::Last,
        argmax: true,
        capture: Vec::new(),
        read_logits: false,
    }
}

impl Session<'_> {
    /// Greedy generation: prefills `prompt` in chunks of at most `chunk` tokens, then decodes
    /// one token at a time. Stops after `n` tokens or at `stop`. Calls `on_token` per token.
    ///
    /// Afterwards the state covers the prompt and every returned token but the last, except
    /// where a stop token ended a pipelined decode: the step that consumes it was already
    /// queued, so the state covers the stop token too. [`Session::pos`] tells which.
    pub fn generate_greedy(
        &mut self,
        prompt: &[u32],
        n: usize,
        chunk: usize,
        stop: Option<u32>,
        on_token: impl FnMut(u32),
    ) -> Result<Vec<u32>, ModelError> {
        let opts = greedy_opts();
        if prompt.is_empty() || n == 0 {
            return Ok(Vec::new());
        }
        let mut last = StepOutput::default();
        for piece in prompt.chunks(chunk.max(1)) {
            last = self.forward(piece, &opts)?;
        }
        self.decode_greedy(last.argmax[0], n, stop, on_token)
    }

    /// Greedy decode from `first` (the token the last step predicted, not yet consumed):
    /// returns `first` and the tokens after it, `n` in all or up to and including `stop`.
    /// State afterwards: as [`Session::generate_greedy`].
    pub fn decode_greedy(
        &mut self,
        first: u32,
        n: usize,
        stop: Option<u32>,
        mut on_token: impl FnMut(u32),
    ) -> Result<Vec<u32>, ModelError> {
        let mut out = Vec::with_capacity(n);
        if n == 0 {
            return Ok(out);
        }
        out.push(first);
        on_token(first);
        if n == 1 || Some(first) == stop {
            return Ok(out);
        }
        if !self.backend.pipelines() {
            let opts = greedy_opts();
            loop {
                let tok = self.forward(&[*out.last().expect("pushed")], &opts)?.argmax[0];
                out.push(tok);
                on_token(tok);
                if out.len() >= n || Some(tok) == stop {
                    return Ok(out);
                }
            }
        }
        // Steps in flight; each consumes the token the one before it produces.
        let mut queued = 0;
        let result = (|| {
            self.submit_step(first, false)?;
            queued += 1;
            loop {
                // Another step only where its token is still needed: n − 1 steps in all.
                if queued < DEPTH && out.len() + queued < n {
                    self.submit_step(0, true)?;
                    queued += 1;
                }
                let tok = self.collect_step()?;
                queued -= 1;
                out.push(tok);
                on_token(tok);
                if out.len() >= n || Some(tok) == stop {
                    return Ok(());
                }
            }
        })();
        // Drain what is still queued (a step past a stop token, or after an error).
        let drained = (0..queued).try_for_each(|_| self.collect_step().map(|_| ()));
        result.and(drained)?;
        Ok(out)
    }

    /// Queues one decode step at the next position: its token is `tok`, or with `fed` the
    /// argmax of the step queued before it (`tok` is then only a placeholder).
    fn submit_step(&mut self, tok: u32, fed: bool) -> Result<(), ModelError> {
        self.check_tokens(&[tok])?;
        let exe = self.exec(1, &greedy_opts(), 0)?;
        let inputs = [
            ("ids", HostData::I32(vec![tok as i32])),
            ("pos", HostData::I32(vec![self.pos as i32])),
        ];
        let feed = Feed {
            output: "argmax",
            input: "ids",
            from_previous: fed,
        };
        let b: &mut dyn Backend = self.backend;
        b.submit(exe, self.weights, self.states, &inputs, feed)?;
        self.pos += 1;
        Ok(())
    }

    /// The token of the oldest queued step.
    fn collect_step(&mut self) -> Result<u32, ModelError> {
        let outs = self.backend.collect()?;
        let out = Self::output(outs, &greedy_opts(), 1)?;
        out.argmax
            .first()
            .copied()
            .ok_or_else(|| ModelError::Config("a decode step returned no argmax".into()))
    }
}
