//! The `deltaspec` command line. (Being written.)

pub fn main() -> i32 {
    0
}
