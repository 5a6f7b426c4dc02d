#![doc = include_str!("model.md")]
