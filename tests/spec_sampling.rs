//! Sampling: plain temperature/top-p sampling and lossless speculative sampling (chain and
//! tree) follow the target's distribution (chi-square over many draws on a tiny model); a
//! drafter that lies about its distribution is caught by the same test.

mod common;

use common::fixtures;
use common::sampling::{chi_square, next_dist, pair_dist, views};
use deltaspec::backend;
use deltaspec::model::{Qwen35, Session};
use deltaspec::spec::sample::generate_sampled;
use deltaspec::spec::testing::{Corrupt, InjectedDrafter, MixtureDrafter};
use deltaspec::spec::tree::tree_round_with;
use deltaspec::spec::{
    Accept, Rollback, RollbackMode, Sampling, SpecConfig, SpecMode, chain_round_with,
    generate_spec, prefill,
};
use deltaspec::util::rng::Rng;
use std::collections::HashMap;

const SAMPLING: Sampling = Sampling {
    // The tiny random models are nearly flat at T = 1: sharpen so that a few thousand
    // draws fill the bins.
    temperature: 0.15,
    top_p: 0.9,
};

fn model() -> Qwen35 {
    Qwen35::load(&fixtures().join("models/tiny-a")).unwrap()
}

#[test]
fn plain_sampling_matches_the_target_distribution() {
    let m = model();
    let prompt = [17u32, 240, 3, 99, 64];
    let p = next_dist(&m, &prompt, &SAMPLING);
    let support = p.iter().filter(|&&x| x > 0.0).count();
    assert!(support > 3, "a degenerate distribution tests nothing");
    let mut be = backend::create("cpu").unwrap();
    let mut s = Session::new(&m, be.as_mut(), prompt.len()).unwrap();
    let empty = s.snapshot().unwrap();
    let mut rng = Rng::new(3);
    let n = 2000;
    let mut obs = HashMap::new();
    for _ in 0..n {
        s.restore(&empty).unwrap();
        let t =
            generate_sampled(&mut s, &prompt, 1, 512, None, &SAMPLING, &mut rng, |_| {}).unwrap();
        *obs.entry(t[0]).or_insert(0) += 1;
    }
    let exp: HashMap<u32, f64> = (0..p.len())
        .filter(|&i| p[i] > 0.0)
        .map(|i| (i as u32, p[i] as f64))
        .collect();
    let (stat, crit, bins) = chi_square(&obs, &exp, n);
    assert!(stat < crit, "chi2 {stat:.1} ≥ {crit:.1} over {bins} bins");
}

/// Draws `(x1, x2)` after a fixed root with chain rounds of speculative sampling.
fn speculative_pairs(
    m: &Qwen35,
    prompt: &[u32],
    lie: bool,
    n: usize,
) -> (HashMap<(u32, u32), usize>, [usize; 3]) {
    let vocab = m.cfg.vocab;
    let mut gbe = backend::create("cpu").unwrap();
    let mut g = Session::new(m, gbe.as_mut(), prompt.len() + 4).unwrap();
    let cont = g.generate_greedy(prompt, 4, 512, None, |_| {}).unwrap();

    let mut be = backend::create("cpu").unwrap();
    let mut s = Session::new(m, be.as_mut(), prompt.len() + 8).unwrap();
    let mut d = MixtureDrafter::new(prompt.len(), cont.clone(), vocab, 0.6, 2, 11);
    if lie {
        d = d.lying();
    }
    let root = prefill(&mut s, &mut d, prompt, 512).unwrap();
    assert_eq!(root, cont[0]);
    let after_prompt = s.snapshot().unwrap();
    let mut rb = Rollback::new(RollbackMode::SnapshotReplay).unwrap();
    let mut rng = Rng::new(42);
    let mut obs = HashMap::new();
    let mut accepted = [0usize; 3];
    for _ in 0..n {
        s.restore(&after_prompt).unwrap();
        d.rewind(prompt.len());
        let mut acc = Accept::Sample {
            sampling: SAMPLING,
            rng: &mut rng,
        };
        let r = chain_round_with(&mut s, &mut d, &mut rb, root, 2, &mut acc).unwrap();
        accepted[r.accepted] += 1;
        let mut e = r.emitted;
        if e.len() < 2 {
            let r2 = chain_round_with(&mut s, &mut d, &mut rb, e[0], 2, &mut acc).unwrap();
            e.push(r2.emitted[0]);
        }
        *obs.entry((e[0], e[1])).or_insert(0) += 1;
    }
    rb.release(&mut s).unwrap();
    (obs, accepted)
}

#[test]
fn speculative_sampling_matches_plain_sampling() {
    let m = model();
    let prompt = [17u32, 240, 3, 99, 64];
    let (p1, exp) = pair_dist(&m, &prompt, &SAMPLING);

    eprintln!(
        "support p1 {} joint {}",
        p1.iter().filter(|&&x| x > 0.0).count(),
        exp.len()
    );
    let n = 1200;
    let (obs, accepted) = speculative_pairs(&m, &prompt, false, n);
    eprintln!("accepted drafts per round: {accepted:?}");
    // Every path of the accept rule ran: rejection at once, after one draft, full accept.
    assert!(
        accepted.iter().all(|&c| c > 50),
        "accepted counts {accepted:?}"
    );
    for (what, o, e) in views(&obs, &exp) {
        let (stat, crit, bins) = chi_square(&o, &e, n);
        eprintln!("{what}: chi2 {stat:.1} (critical {crit:.1}, {bins} bins)");
        assert!(
            stat < crit,
            "{what}: chi2 {stat:.1} ≥ {crit:.1} over {bins} bins"
        );
    }

    // Negative control: the same test catches a drafter that misreports q.
    let n = 500;
    let (bad, _) = speculative_pairs(&m, &prompt, true, n);
    let caught = views(&bad, &exp).into_iter().any(|(what, o, e)| {
        let (stat, crit, _) = chi_square(&o, &e, n);
        eprintln!("lying drafter, {what}: chi2 {stat:.1} (critical {crit:.1})");
        stat > 2.0 * crit
    });
    assert!(caught, "a drafter that misreports q was not caught");
}

/// Draws `(x1, x2)` after a fixed root with tree rounds of speculative sampling (depth 2,
/// budget 4). The drafter's chain token at depth 1 is wrong and the greedy token is its
/// sibling, so rounds reject a child and accept a later one. Returns the draws and the
/// accepted drafts per first round.
fn tree_pairs(m: &Qwen35, prompt: &[u32], n: usize) -> (HashMap<(u32, u32), usize>, [usize; 3]) {
    let vocab = m.cfg.vocab;
    let mut gbe = backend::create("cpu").unwrap();
    let mut g = Session::new(m, gbe.as_mut(), prompt.len() + 4).unwrap();
    let cont = g.generate_greedy(prompt, 4, 512, None, |_| {}).unwrap();

    let mut be = backend::create("cpu").unwrap();
    let mut s = Session::new(m, be.as_mut(), prompt.len() + 8).unwrap();
    s.reserve_tree_rows(5).unwrap();
    let empty = s.snapshot().unwrap();
    let mut rng = Rng::new(43);
    let mut obs = HashMap::new();
    let mut accepted = [0usize; 3];
    for _ in 0..n {
        s.restore(&empty).unwrap();
        let mut d = InjectedDrafter::new(prompt.len(), cont.clone(), vocab, 2, Corrupt::At(0));
        let root = prefill(&mut s, &mut d, prompt, 512).unwrap();
        assert_eq!(root, cont[0]);
        let mut acc = Accept::Sample {
            sampling: SAMPLING,
            rng: &mut rng,
        };
        let r = tree_round_with(&mut s, &mut d, root, 2, 4, &mut acc).unwrap();
        accepted[r.accepted] += 1;
        let mut e = r.emitted;
        if e.len() < 2 {
            let r2 = tree_round_with(&mut s, &mut d, e[0], 2, 4, &mut acc).unwrap();
            e.push(r2.emitted[0]);
        }
        *obs.entry((e[0], e[1])).or_insert(0) += 1;
    }
    (obs, accepted)
}

#[test]
fn tree_speculative_sampling_matches_plain_sampling() {
    let m = model();
    let prompt = [17u32, 240, 3, 99, 64];
    let (_, exp) = pair_dist(&m, &prompt, &SAMPLING);
    let n = 1200;
    let (obs, accepted) = tree_pairs(&m, &prompt, n);
    eprintln!("accepted drafts per first round: {accepted:?}");
    // Rounds that accepted nothing and rounds that accepted a sibling of the rejected chain
    // token both ran.
    assert!(
        accepted[0] > 50 && accepted[1] + accepted[2] > 50,
        "accepted counts {accepted:?}"
    );
    for (what, o, e) in views(&obs, &exp) {
        let (stat, crit, bins) = chi_square(&o, &e, n);
        eprintln!("tree, {what}: chi2 {stat:.1} (critical {crit:.1}, {bins} bins)");
        assert!(
            stat < crit,
            "tree, {what}: chi2 {stat:.1} ≥ {crit:.1} over {bins} bins"
        );
    }
}

#[test]
fn sampled_generate_spec_is_seeded_and_temperature_zero_is_greedy() {
    let m = model();
    let vocab = m.cfg.vocab;
    let prompt = [1u32, 2, 3, 4];
    let n = 16;
    let run = |sampling: Sampling, seed: u64| {
        let mut be = backend::create("cpu").unwrap();
        let mut s = Session::new(&m, be.as_mut(), prompt.len() + n).unwrap();
        let mut gbe = backend::create("cpu").unwrap();
        let mut g = Session::new(&m, gbe.as_mut(), prompt.len() + n).unwrap();
        let cont = g.generate_greedy(&prompt, n, 512, None, |_| {}).unwrap();
        let mut d = MixtureDrafter::new(prompt.len(), cont.clone(), vocab, 0.7, 4, seed);
        let cfg = SpecConfig {
            n,
            mode: SpecMode::Chain,
            sampling,
            seed,
            ..Default::default()
        };
        let out = generate_spec(&mut s, &mut d, &prompt, &cfg, |_| {}, |_| {}).unwrap();
        (out.tokens, cont)
    };
    let (a, _) = run(SAMPLING, 5);
    let (b, _) = run(SAMPLING, 5);
    assert_eq!(a, b, "same seed, same tokens");
    assert_eq!(a.len(), n);
    let (greedy, cont) = run(Sampling::greedy(), 5);
    assert_eq!(greedy, cont);
}
