//! DDTree speculation (speculation.md §3; Ringel & Romano, `liranringel/ddtree`): a best-first
//! draft tree under a node budget, verified in one target forward with an ancestor-only mask.
//!
//! ```text
//! cands[d]   = the drafter's top-k (token, log-prob) at depth d + 1      (Drafter::propose_topk)
//! tree       = root + the top-1 chain (chain seed), then best-first by cumulative log-prob:
//!              popping a node pushes its next sibling (rank + 1) and its first child (rank 0)
//! verify     = Session::forward_tree: row i at position base + depth(i), attending to the
//!              committed context and its ancestors; conv / DeltaNet continue from the parent
//! accept     = walk from the root along the target's argmax through the children
//!              (sampling, T > 0: at each node test the children one by one as point proposals
//!              against the residual of the target's distribution, see `accept_sampled`)
//! commit     = the path's K/V rows compacted to base .. base + a, the last row's DeltaNet state
//! ```
//! Greedy: the accepted path is exactly what plain greedy decoding would produce. Sampled: each
//! emitted token is distributed exactly as plain sampling from the target would draw it.

use super::chain::{Accept, ChainRound};
use super::sample::draw;
use super::{DraftRequest, Drafter, Features, Sampling, SpecError, env};
use crate::model::Session;
use crate::model::qwen35::{GraphOptions, LogitRows};
use crate::util::rng::Rng;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Instant;

/// A draft tree in depth-first order: row 0 is the root (the last emitted token), every other
/// row's parent comes before it, and the top-1 chain is rows `0, 1, 2, …`.
#[derive(Clone, Debug, PartialEq)]
pub struct DraftTree {
    pub tokens: Vec<u32>,
    /// −1 for the root.
    pub parents: Vec<i32>,
}

impl DraftTree {
    /// The children of row `r`, in row order.
    pub fn children(&self, r: usize) -> impl Iterator<Item = usize> + '_ {
        (r + 1..self.tokens.len()).filter(move |&c| self.parents[c] == r as i32)
    }

    /// Walks from the root along `argmax` (the target's choice after each row): returns the
    /// accepted path of rows (root first) and the bonus token after its last row.
    pub fn accept(&self, argmax: &[u32]) -> (Vec<usize>, u32) {
        let mut path = vec![0];
        loop {
            let cur = *path.last().expect("non-empty");
            let want = argmax[cur];
            match self.children(cur).find(|&c| self.tokens[c] == want) {
                Some(c) => path.push(c),
                None => return (path, want),
            }
        }
    }

    /// Lossless tree acceptance for sampling. `dist(row)` is the target's distribution after
    /// a row (`vocab` values, the sampling transform applied); it is asked only for the rows
    /// the walk reaches (a path, not the whole tree: at a 248k vocab a row costs a softmax).
    /// At a node with distribution `r`
    /// (initially `p` of the node), child `c` (token `t`) is accepted with probability
    /// `r(t) / Σr`; a rejected child's token leaves `r` (`r(t) = 0`) and the next child is
    /// tried. An accepted child becomes the node; when every child is rejected (or the node
    /// has none), the bonus is drawn from `r`. The children are deterministic proposals (the
    /// drafter's top-k), so this is sampling from `p` by testing candidates one at a time
    /// (the chain rule of [`super::sample`] with one-hot q, widened to siblings): every
    /// token `t` leaves the node with probability `p(t)`, whatever the tree holds. Returns
    /// the accepted path of rows (root first) and the bonus.
    pub fn accept_sampled(
        &self,
        dist: impl Fn(usize) -> Vec<f32>,
        vocab: usize,
        rng: &mut Rng,
    ) -> Result<(Vec<usize>, u32), SpecError> {
        let mut path = vec![0];
        loop {
            let cur = *path.last().expect("non-empty");
            let p = dist(cur);
            if p.len() != vocab {
                return Err(SpecError::Invalid(format!(
                    "tree accept: row {cur}'s distribution holds {} values, the vocabulary {vocab}",
                    p.len()
                )));
            }
            let mut r = p.clone();
            let mut mass: f64 = r.iter().map(|&x| f64::from(x)).sum();
            let mut next = None;
            for c in self.children(cur) {
                let t = self.tokens[c] as usize;
                let Some(&pt) = r.get(t) else {
                    return Err(SpecError::Invalid(format!(
                        "tree row {c} holds token {t}, outside the vocabulary of {vocab}"
                    )));
                };
                if pt > 0.0 && mass > 0.0 {
                    let ratio = f64::from(pt) / mass;
                    if ratio >= 1.0 || f64::from(rng.uniform()) < ratio {
                        next = Some(c);
                        break;
                    }
                }
                mass -= f64::from(pt);
                r[t] = 0.0;
            }
            match next {
                Some(c) => path.push(c),
                None => {
                    // Every token of r was a rejected child only if p's whole mass was on
                    // them, which the rejections rule out up to rounding: fall back to p.
                    let bonus = if r.iter().any(|&x| x > 0.0) {
                        draw(&r, rng)
                    } else {
                        draw(&p, rng)
                    };
                    return Ok((path, bonus));
                }
            }
        }
    }
}

/// A candidate node of the best-first search.
struct Cand {
    score: f32,
    /// Index of the parent in `nodes`.
    parent: usize,
    depth: usize,
    rank: usize,
}

impl PartialEq for Cand {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Cand {}
impl PartialOrd for Cand {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Cand {
    /// Higher score first; ties broken towards shallower, then lower-rank nodes (deterministic).
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then(o.depth.cmp(&self.depth))
            .then(o.rank.cmp(&self.rank))
            .then(o.parent.cmp(&self.parent))
    }
}

/// The node budget a tree round uses under `budget` (at most): one less than a row tile of the
/// backend (see [`crate::backend::Backend::step_row_tiles`]) where the tree's `budget + 1` rows
/// would pass that tile by at most a quarter of it. Those few rows would run the next tile,
/// at about its cost, for the least likely nodes of the tree: hip on an H100 (27B IQ4_XS)
/// steps 17 rows in 22.9 ms against 15.5 ms for 16, and a budget-16 tree ran 1.43 × AR on
/// the code replay profile against 1.93 × at budget 15.
pub fn tile_budget(budget: usize, tiles: &[usize]) -> usize {
    let rows = budget + 1;
    match tiles.iter().rev().find(|&&t| t <= rows) {
        Some(&t) if rows > t && rows - t <= t / 4 => t - 1,
        _ => budget,
    }
}

/// [`tile_budget`] on the session's backend: the node budget its tree rounds use under
/// `budget`, and the rows to reserve for them (`+ 1`, the root) so that backends whose
/// verifies pad to the reserved width (wgpu) pad to the tile and not past it.
pub fn session_budget(s: &Session<'_>, budget: usize) -> usize {
    tile_budget(budget, &s.step_row_tiles())
}

/// Builds the best-first tree of at most `budget` draft nodes (plus the root) over the
/// per-depth candidates `cands[d]` (token, log-prob), sorted best first. The top-1 chain is
/// inserted first (as deep as the budget allows), then nodes by cumulative log-prob.
pub fn build_tree(root: u32, cands: &[Vec<(u32, f32)>], budget: usize) -> DraftTree {
    // nodes: (token, parent, depth, rank, cumulative log-prob); node 0 is the root.
    let mut nodes: Vec<(u32, usize, usize, usize, f32)> = vec![(root, usize::MAX, 0, 0, 0.0)];
    let mut heap = BinaryHeap::new();
    let depth_max = cands.iter().take_while(|c| !c.is_empty()).count();
    let push =
        |heap: &mut BinaryHeap<Cand>, parent: usize, depth: usize, rank: usize, base: f32| {
            if depth <= depth_max
                && let Some(&(_, lp)) = cands[depth - 1].get(rank)
            {
                heap.push(Cand {
                    score: base + lp,
                    parent,
                    depth,
                    rank,
                });
            }
        };
    // Chain seed: the top-1 token at every depth; each chain node's next sibling is a
    // candidate.
    let mut last = 0;
    for d in 1..=depth_max.min(budget) {
        let (tok, lp) = cands[d - 1][0];
        let base = nodes[last].4;
        nodes.push((tok, last, d, 0, base + lp));
        push(&mut heap, last, d, 1, base);
        last = nodes.len() - 1;
    }
    push(&mut heap, last, nodes[last].2 + 1, 0, nodes[last].4);
    while nodes.len() <= budget {
        let Some(c) = heap.pop() else { break };
        let (tok, _) = cands[c.depth - 1][c.rank];
        let base = nodes[c.parent].4;
        nodes.push((tok, c.parent, c.depth, c.rank, c.score));
        let me = nodes.len() - 1;
        push(&mut heap, c.parent, c.depth, c.rank + 1, base);
        push(&mut heap, me, c.depth + 1, 0, c.score);
    }
    // Depth-first order, children in insertion order (so the chain comes first).
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate().skip(1) {
        children[n.1].push(i);
    }
    let mut tree = DraftTree {
        tokens: Vec::with_capacity(nodes.len()),
        parents: Vec::with_capacity(nodes.len()),
    };
    let mut stack = vec![(0usize, -1i32)];
    while let Some((n, parent)) = stack.pop() {
        let row = tree.tokens.len() as i32;
        tree.tokens.push(nodes[n].0);
        tree.parents.push(parent);
        for &c in children[n].iter().rev() {
            stack.push((c, row));
        }
    }
    tree
}

/// Candidates per position the tree asks the drafter for.
pub fn topk_for(budget: usize) -> usize {
    budget.clamp(1, 8)
}

/// Runs one greedy tree round after `root`: drafts up to `max_depth` positions, builds the
/// tree under `budget` nodes, verifies it in one forward, commits the accepted path. On
/// return the target has processed root + the accepted drafts and the drafter has their
/// features; the bonus is the next root. Needs [`Session::reserve_tree_rows`] ≥ budget + 1.
pub fn tree_round(
    s: &mut Session<'_>,
    drafter: &mut dyn Drafter,
    root: u32,
    max_depth: usize,
    budget: usize,
) -> Result<ChainRound, SpecError> {
    tree_round_with(s, drafter, root, max_depth, budget, &mut Accept::Greedy)
}

/// [`tree_round`] with a chosen accept rule: greedy ([`DraftTree::accept`]) or sampling
/// ([`DraftTree::accept_sampled`]; the drafter still proposes its top-k, deterministically).
pub fn tree_round_with(
    s: &mut Session<'_>,
    drafter: &mut dyn Drafter,
    root: u32,
    max_depth: usize,
    budget: usize,
    accept: &mut Accept<'_>,
) -> Result<ChainRound, SpecError> {
    let (base, room) = super::chain::room(s)?;
    // Every row of the tree occupies a cache row during verify.
    let budget = session_budget(s, budget.min(room - 1).min(s.tree_rows().saturating_sub(1)));
    let max_depth = max_depth.min(drafter.max_draft()).min(budget);
    let layers = drafter.feature_layers();
    let width = s.model().cfg.hidden;

    let t0 = Instant::now();
    let tree = if max_depth > 0 {
        let req = DraftRequest {
            root,
            max: max_depth,
            sampling: Sampling::greedy(),
        };
        let mut cands = drafter.propose_topk(&mut env(s), &req, topk_for(budget))?;
        cands.truncate(max_depth);
        build_tree(root, &cands, budget)
    } else {
        build_tree(root, &[], 0)
    };
    let t1 = Instant::now();
    let sampled = matches!(accept, Accept::Sample { .. });
    let opts = GraphOptions {
        logits: LogitRows::All,
        argmax: !sampled,
        capture: layers.clone(),
        // Greedy acceptance reads only the argmax.
        read_logits: sampled,
    };
    let out = s.forward_tree(&tree.tokens, &tree.parents, &opts)?;
    let t2 = Instant::now();
    let (path, bonus) = match accept {
        Accept::Greedy => tree.accept(&out.argmax),
        Accept::Sample { sampling, rng } => {
            let vocab = s.model().cfg.vocab;
            if out.logits.len() != tree.tokens.len() * vocab {
                return Err(SpecError::Invalid(format!(
                    "tree verify returned {} logits for {} rows of vocab {vocab}",
                    out.logits.len(),
                    tree.tokens.len()
                )));
            }
            let row = |r: usize| sampling.probs(&out.logits[r * vocab..(r + 1) * vocab]);
            tree.accept_sampled(row, vocab, rng)?
        }
    };
    s.commit_tree(&path)?;
    let t3 = Instant::now();

    let feats = Features::from_step(out.hidden, &layers, base, tree.tokens.len(), width)?;
    let committed = Features {
        start: base,
        rows: path.len(),
        width,
        layers: feats
            .layers
            .iter()
            .enumerate()
            .map(|(i, (l, _))| {
                let rows: Vec<f32> = path
                    .iter()
                    .flat_map(|&r| feats.row(i, r).iter().copied())
                    .collect();
                (*l, rows)
            })
            .collect(),
    };
    let toks: Vec<u32> = path.iter().map(|&r| tree.tokens[r]).collect();
    drafter.commit(&mut env(s), &toks, &committed)?;
    let t4 = Instant::now();

    let mut emitted = toks[1..].to_vec();
    emitted.push(bonus);
    Ok(ChainRound {
        drafted: tree.tokens.len() - 1,
        accepted: path.len() - 1,
        emitted,
        draft_s: (t1 - t0).as_secs_f64(),
        verify_s: (t2 - t1).as_secs_f64(),
        rollback_s: (t3 - t2).as_secs_f64(),
        commit_s: (t4 - t3).as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(list: &[(u32, f32)]) -> Vec<(u32, f32)> {
        list.to_vec()
    }

    #[test]
    fn tree_budgets_stop_at_a_row_tile_they_would_barely_pass() {
        let hip = [1, 2, 4, 8, 16, 32];
        // 17 rows would run the 32-row tile for one node: 16 rows instead; 18-20 as well.
        for (budget, want) in [(16, 15), (17, 15), (19, 15), (8, 7), (9, 7), (4, 3)] {
            assert_eq!(tile_budget(budget, &hip), want, "budget {budget}");
        }
        // At a tile, inside one, or far enough past it for the next to pay: unchanged.
        for budget in [0, 1, 2, 3, 7, 10, 12, 15, 20, 31, 40, 41, 100] {
            assert_eq!(tile_budget(budget, &hip), budget, "budget {budget}");
        }
        // Past the largest tile by a quarter of it: trimmed to it.
        assert_eq!(tile_budget(39, &hip), 31);
        // No tiles known (CPU, wgpu's fixed widths): the budget asked for.
        assert_eq!(tile_budget(16, &[]), 16);
    }

    #[test]
    fn chain_seed_then_best_first() {
        let cands = vec![
            c(&[(10, -0.1), (11, -0.5), (12, -3.0)]),
            c(&[(20, -2.0), (21, -2.5)]),
            c(&[(30, -0.1)]),
        ];
        let t = build_tree(1, &cands, 5);
        // Chain 1 → 10 → 20 → 30 first, then 11 (−0.5 beats 21's −2.6 and 20-under-11's −2.5).
        assert_eq!(t.tokens[..4], [1, 10, 20, 30]);
        assert_eq!(t.parents[..4], [-1, 0, 1, 2]);
        assert_eq!(t.tokens.len(), 6);
        // 11 (depth 1) and then the best of: 21 under 10 (−2.6), 20 under 11 (−2.5).
        let row11 = t.tokens.iter().position(|&x| x == 11).unwrap();
        assert_eq!(t.parents[row11], 0);
        let last = t.tokens.len() - 1;
        assert_eq!((t.tokens[last], t.parents[last]), (20, row11 as i32));
        for (i, &p) in t.parents.iter().enumerate().skip(1) {
            assert!((p as usize) < i, "DFS order");
        }
    }

    #[test]
    fn budget_limits_the_chain_and_accept_walks_children() {
        let cands = vec![c(&[(5, 0.0), (6, -1.0)]), c(&[(7, 0.0)]), c(&[(8, 0.0)])];
        let t = build_tree(0, &cands, 2);
        assert_eq!(t.tokens, vec![0, 5, 7]);
        let t = build_tree(0, &cands, 4);
        assert_eq!(t.tokens, vec![0, 5, 7, 8, 6]);
        // Target: after 0 → 6, after 6 → 9: accepts row 4 (token 6), bonus 9.
        let mut argmax = vec![6, 0, 0, 0, 9];
        assert_eq!(t.accept(&argmax), (vec![0, 4], 9));
        argmax[0] = 5;
        argmax[1] = 7;
        argmax[2] = 1;
        assert_eq!(t.accept(&argmax), (vec![0, 1, 2], 1));
        assert_eq!(build_tree(3, &[], 8).tokens, vec![3]);
    }

    /// Root 9 with children 1 (row 1, which has child 0: row 2) and 3 (row 3, a leaf).
    fn small_tree() -> DraftTree {
        DraftTree {
            tokens: vec![9, 1, 0, 3],
            parents: vec![-1, 0, 1, 0],
        }
    }

    #[test]
    fn sampled_accept_emits_what_the_target_would_sample() {
        let t = small_tree();
        let p: Vec<f32> = [
            [0.1, 0.3, 0.2, 0.25, 0.15],
            [0.4, 0.1, 0.2, 0.2, 0.1],
            [0.2; 5],
            [0.05, 0.05, 0.6, 0.1, 0.2],
        ]
        .concat();
        let row = |r: usize| &p[r * 5..r * 5 + 5];
        // Exact distribution of the emitted tokens (path tokens after the root, then the
        // bonus): x1 ~ p(root); after a tree token, the next ~ p of its row.
        let mut want = std::collections::HashMap::new();
        for x1 in 0..5u32 {
            let a = f64::from(row(0)[x1 as usize]);
            let at = match x1 {
                1 => Some(1),
                3 => Some(3),
                _ => None,
            };
            match at {
                None => *want.entry(vec![x1]).or_insert(0.0) += a,
                Some(r) => {
                    for x2 in 0..5u32 {
                        let b = a * f64::from(row(r)[x2 as usize]);
                        if r == 1 && x2 == 0 {
                            for x3 in 0..5u32 {
                                *want.entry(vec![x1, x2, x3]).or_insert(0.0) +=
                                    b * f64::from(row(2)[x3 as usize]);
                            }
                        } else {
                            *want.entry(vec![x1, x2]).or_insert(0.0) += b;
                        }
                    }
                }
            }
        }
        let n = 200_000;
        let mut rng = Rng::new(5);
        let mut got = std::collections::HashMap::new();
        for _ in 0..n {
            let (path, bonus) = t.accept_sampled(|r| row(r).to_vec(), 5, &mut rng).unwrap();
            let mut e: Vec<u32> = path[1..].iter().map(|&r| t.tokens[r]).collect();
            e.push(bonus);
            *got.entry(e).or_insert(0usize) += 1;
        }
        for k in got.keys() {
            assert!(
                want.contains_key(k),
                "emitted {k:?}, which has probability 0"
            );
        }
        for (k, &w) in &want {
            let f = got.get(k).copied().unwrap_or(0) as f64 / n as f64;
            // 5 standard deviations of a frequency estimate at most 0.0011.
            assert!(
                (f - w).abs() < 0.0056,
                "{k:?}: frequency {f:.4}, probability {w:.4}"
            );
        }
    }

    #[test]
    fn sampled_accept_with_one_hot_targets_is_the_greedy_walk() {
        let t = small_tree();
        let one_hot = |argmax: &[u32]| -> Vec<f32> {
            argmax
                .iter()
                .flat_map(|&a| (0..5).map(move |i| if i == a { 1.0 } else { 0.0 }))
                .collect()
        };
        let mut rng = Rng::new(1);
        for argmax in [[1u32, 0, 4, 2], [3, 0, 0, 2], [4, 1, 1, 1], [1, 2, 0, 0]] {
            let p = one_hot(&argmax);
            let got = t
                .accept_sampled(|r| p[r * 5..r * 5 + 5].to_vec(), 5, &mut rng)
                .unwrap();
            assert_eq!(got, t.accept(&argmax), "argmax {argmax:?}");
        }
        assert!(t.accept_sampled(|_| vec![0.2; 4], 5, &mut rng).is_err());
        let bad = DraftTree {
            tokens: vec![0, 7],
            parents: vec![-1, 0],
        };
        assert!(bad.accept_sampled(|_| vec![0.2; 5], 5, &mut rng).is_err());
    }
}
