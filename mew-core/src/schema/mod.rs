//! JSON Schema, the one schema module of the core.
//!
//! Two views of one language: [`Schema`] validates values against any tool input schema (a
//! participant's, a bridged MCP server's, a tools-mode agent's), and [`JsonSchema`] is the
//! typed form a tools-mode definition is written in: a tagged enum whose loader reports
//! every problem with its path, and which knows defaults and how to read a command-line
//! value of its type. A typed schema is validated through the same [`Schema`], so there is
//! one set of rules.

#[cfg(test)]
mod proptests;
mod typed;
mod validate;

pub use typed::{
    Additional, ArraySchema, BooleanSchema, Items, JsonSchema, Meta, NumericSchema, ObjectSchema,
    Problem, StringSchema,
};
pub use validate::{Schema, SchemaViolation};
