//! Runs every checked-in corpus input, and 20 000 inputs derived from them, through each
//! target's checks on a stable toolchain (CI): `cargo test --no-default-features` in `fuzz/`.
//! libFuzzer (nightly) explores from the same corpus, guided by coverage:
//! `cargo +nightly fuzz run <target> corpus/<target>`.

use std::path::Path;

/// Inputs tried past the corpus, per target: what a fuzzer tries first (random bytes, corpus
/// inputs with bytes changed, inserted and cut), without libFuzzer's coverage feedback.
const EXPLORED: usize = 20_000;

/// xorshift64*: the same inputs on every run, so a failure here reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn mutated(rng: &mut Rng, corpus: &[Vec<u8>]) -> Vec<u8> {
    if rng.below(4) == 0 {
        return (0..rng.below(160)).map(|_| rng.next() as u8).collect();
    }
    let mut bytes = corpus[rng.below(corpus.len())].clone();
    for _ in 0..=rng.below(4) {
        let at = rng.below(bytes.len() + 1);
        match rng.below(3) {
            0 if at < bytes.len() => bytes[at] = rng.next() as u8,
            1 => bytes.insert(at, rng.next() as u8),
            _ => bytes.truncate(at.max(1)),
        }
    }
    bytes
}

fn check_one(target: &str, check: fn(&[u8]), bytes: &[u8], what: &dyn Fn() -> String) {
    // A failing input names itself (the panic message alone would not).
    if std::panic::catch_unwind(|| check(bytes)).is_err() {
        panic!("{target}: {} fails (bytes {bytes:02x?})", what());
    }
}

fn run(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target);
    let mut corpus = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        check_one(target, check, &bytes, &|| path.display().to_string());
        corpus.push(bytes);
    }
    assert!(!corpus.is_empty(), "{target}: the corpus is empty");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ target.len() as u64);
    for i in 0..EXPLORED {
        let bytes = mutated(&mut rng, &corpus);
        check_one(target, check, &bytes, &|| format!("explored input {i}"));
    }
    println!("{target}: {} corpus inputs, {EXPLORED} explored", corpus.len());
}

#[test]
fn import_managed() {
    run("import_managed", dlpx_fuzz::import_managed);
}

#[test]
fn allocator() {
    run("allocator", dlpx_fuzz::allocator);
}

#[test]
fn chain_walk() {
    run("chain_walk", dlpx_fuzz::chain_walk);
}

#[test]
fn dtype_device() {
    run("dtype_device", dlpx_fuzz::dtype_device);
}

#[test]
fn copy() {
    run("copy", dlpx_fuzz::copy);
}
