//! The `mew` command-line program.

fn main() {
    println!("gateway coming");
}
