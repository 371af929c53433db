//! The parts of the `hopper` binary that are worth calling on their own: parsing of
//! command-line values. The binary uses them, and so do the fuzz targets in `fuzz/`.

pub mod duration;
