//! Sequence state: snapshot/restore is exact, prefill in pieces equals prefill at once, and the
//! decode path's state equals the prefill path's.

mod common;

use common::{fixtures, rel_err};
use deltaspec::backend;
use deltaspec::model::qwen35::{GraphOptions, LogitRows};
use deltaspec::model::{LayerKind, Qwen35, Session};

fn all_rows() -> GraphOptions {
    GraphOptions {
        logits: LogitRows::All,
        ..Default::default()
    }
}

fn state_names(m: &Qwen35) -> Vec<String> {
    m.state_decls(1).into_iter().map(|d| d.name).collect()
}

#[test]
fn snapshot_restore_is_exact() {
    let m = Qwen35::load(&fixtures().join("models/tiny-a")).unwrap();
    let mut be = backend::create("cpu").unwrap();
    let mut s = Session::new(&m, be.as_mut(), 32).unwrap();
    let prompt: Vec<u32> = (0..10).map(|i| (i * 37 % 256) as u32).collect();
    s.forward(&prompt, &all_rows()).unwrap();
    let before: Vec<Vec<f32>> = state_names(&m)
        .iter()
        .map(|n| s.read_state(n).unwrap())
        .collect();
    let snap = s.snapshot().unwrap();
    let a = s.forward(&[3, 1, 4, 1, 5], &all_rows()).unwrap().logits;
    s.restore(&snap).unwrap();
    assert_eq!(s.pos(), 10);
    let after: Vec<Vec<f32>> = state_names(&m)
        .iter()
        .map(|n| s.read_state(n).unwrap())
        .collect();
    assert_eq!(before, after, "restored state differs");
    let b = s.forward(&[3, 1, 4, 1, 5], &all_rows()).unwrap().logits;
    assert_eq!(a, b, "replay after restore must be bit-identical");
    s.release(snap).unwrap();
}

#[test]
fn chunked_prefill_and_decode_path_leave_the_same_state() {
    let m = Qwen35::load(&fixtures().join("models/tiny-b")).unwrap();
    let ids: Vec<u32> = (0..23).map(|i| (i * 91 % 256) as u32).collect();
    let mut whole_be = backend::create("cpu").unwrap();
    let mut whole = Session::new(&m, whole_be.as_mut(), 32).unwrap();
    whole.forward(&ids, &all_rows()).unwrap();
    let mut parts_be = backend::create("cpu").unwrap();
    let mut parts = Session::new(&m, parts_be.as_mut(), 32).unwrap();
    for piece in [&ids[..7], &ids[7..8], &ids[8..20], &ids[20..]] {
        parts.forward(piece, &all_rows()).unwrap();
    }
    for (i, kind) in m.cfg.layers.iter().enumerate() {
        let names = match kind {
            LayerKind::DeltaNet => vec![
                deltaspec::state::conv_state(i),
                deltaspec::state::ssm_state(i),
            ],
            LayerKind::Attention => {
                vec![deltaspec::state::k_cache(i), deltaspec::state::v_cache(i)]
            }
        };
        for n in names {
            let (a, b) = (whole.read_state(&n).unwrap(), parts.read_state(&n).unwrap());
            let e = rel_err(&b, &a);
            assert!(e < 1e-6, "{n}: rel err {e:e}");
        }
    }
}

/// A greedy step that reads back only the argmax gets the argmax of the logits it did not read,
/// and a step with neither (a rollback replay, no lm_head) leaves the same state.
#[test]
fn argmax_only_and_headless_steps_match_the_full_step() {
    let m = Qwen35::load(&fixtures().join("models/tiny-a")).unwrap();
    let prompt: Vec<u32> = (0..9).map(|i| (i * 53 % 256) as u32).collect();
    let full = GraphOptions {
        argmax: true,
        ..all_rows()
    };
    let argmax_only = GraphOptions {
        read_logits: false,
        ..full.clone()
    };
    let headless = GraphOptions {
        argmax: false,
        read_logits: false,
        ..full.clone()
    };
    let mut be = [
        backend::create("cpu").unwrap(),
        backend::create("cpu").unwrap(),
        backend::create("cpu").unwrap(),
    ];
    let [a, b, c] = &mut be;
    let mut sa = Session::new(&m, a.as_mut(), 16).unwrap();
    let mut sb = Session::new(&m, b.as_mut(), 16).unwrap();
    let mut sc = Session::new(&m, c.as_mut(), 16).unwrap();
    let fa = sa.forward(&prompt, &full).unwrap();
    let fb = sb.forward(&prompt, &argmax_only).unwrap();
    let fc = sc.forward(&prompt, &headless).unwrap();
    assert_eq!(fa.logits.len(), prompt.len() * m.cfg.vocab);
    assert!(fb.logits.is_empty() && fc.logits.is_empty() && fc.argmax.is_empty());
    assert_eq!(fa.argmax, fb.argmax);
    let best =
        |row: &[f32]| (0..row.len()).fold(0, |b, i| if row[i] > row[b] { i } else { b }) as u32;
    let want: Vec<u32> = fa.logits.chunks(m.cfg.vocab).map(best).collect();
    assert_eq!(fa.argmax, want);
    for n in state_names(&m) {
        let sa_n = sa.read_state(&n).unwrap();
        assert_eq!(
            sa_n,
            sb.read_state(&n).unwrap(),
            "{n} after the argmax-only step"
        );
        assert_eq!(
            sa_n,
            sc.read_state(&n).unwrap(),
            "{n} after the headless step"
        );
    }
}

#[test]
fn verify_graphs_ask_for_rows_equal_to_decode() {
    // Prompts may take prompt-only kernels (wgpu's cooperative-matrix matmul); verify steps,
    // chain (every row's logits) or tree, must keep decode's kernels so greedy speculation is
    // lossless.
    let m = Qwen35::load(&fixtures().join("models/tiny-a")).unwrap();
    let last = GraphOptions {
        logits: LogitRows::Last,
        argmax: true,
        ..Default::default()
    };
    assert!(!m.step_graph(100, 128, &last).unwrap().rows_match_decode);
    assert!(
        m.step_graph(100, 128, &all_rows())
            .unwrap()
            .rows_match_decode
    );
    assert!(
        m.tree_graph(100, 128, 100, &last)
            .unwrap()
            .rows_match_decode
    );
}
