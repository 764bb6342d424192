//! A pickled value as the snapshot reader needs it: a tree of dicts, lists and scalars, read
//! through `serde-pickle` with its nesting bounded, and with the keys that only hold stack
//! traces skipped rather than copied.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// The deepest nesting the reader follows. PyTorch's snapshots nest six levels.
pub const MAX_DEPTH: usize = 32;

/// Keys whose values are stack traces or free-form context, never needed for replay.
const SKIPPED_KEYS: [&str; 4] = ["frames", "history", "compile_context", "user_metadata"];

/// A pickled value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    None,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Bytes,
    /// Lists, tuples and sets.
    List(Vec<Node>),
    /// Dicts with string keys; entries with other keys are dropped.
    Dict(Vec<(String, Node)>),
    /// A value under a skipped key.
    Skipped,
}

impl Node {
    /// What kind of value this is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Node::None => "None",
            Node::Bool(_) => "a bool",
            Node::Int(_) => "an int",
            Node::Float(_) => "a float",
            Node::Str(_) => "a str",
            Node::Bytes => "bytes",
            Node::List(_) => "a list",
            Node::Dict(_) => "a dict",
            Node::Skipped => "skipped",
        }
    }

    /// The value under `key`, for a dict.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Dict(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// Reads one [`Node`] at nesting `depth`.
pub(crate) struct NodeSeed {
    pub depth: usize,
}

impl<'de> DeserializeSeed<'de> for NodeSeed {
    type Value = Node;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        deserializer.deserialize_any(NodeVisitor { depth: self.depth })
    }
}

struct NodeVisitor {
    depth: usize,
}

fn too_deep<E: de::Error>() -> E {
    E::custom(format!(
        "values are nested more than {MAX_DEPTH} levels deep; a PyTorch snapshot nests six"
    ))
}

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a pickled value")
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::None)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::None)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Int(v.into()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Node, E> {
        i128::try_from(v)
            .map(Node::Int)
            .map_err(|_| E::custom("an integer beyond 2^127"))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_bytes<E>(self, _v: &[u8]) -> Result<Node, E> {
        Ok(Node::Bytes)
    }
    fn visit_byte_buf<E>(self, _v: Vec<u8>) -> Result<Node, E> {
        Ok(Node::Bytes)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        if self.depth >= MAX_DEPTH {
            return Err(too_deep());
        }
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
        while let Some(item) = seq.next_element_seed(NodeSeed {
            depth: self.depth + 1,
        })? {
            items.push(item);
        }
        Ok(Node::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        if self.depth >= MAX_DEPTH {
            return Err(too_deep());
        }
        let mut entries = Vec::new();
        while let Some(key) = map.next_key_seed(NodeSeed {
            depth: self.depth + 1,
        })? {
            let skip = matches!(&key, Node::Str(k) if SKIPPED_KEYS.contains(&k.as_str()));
            if skip {
                map.next_value_seed(Skip {
                    depth: self.depth + 1,
                })?;
            }
            let value = if skip {
                Node::Skipped
            } else {
                map.next_value_seed(NodeSeed {
                    depth: self.depth + 1,
                })?
            };
            if let Node::Str(key) = key {
                entries.push((key, value));
            }
        }
        Ok(Node::Dict(entries))
    }
}

/// Reads past one value without keeping it, with the same bound on nesting.
struct Skip {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a pickled value")
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_i128<E>(self, _: i128) -> Result<(), E> {
        Ok(())
    }
    fn visit_u128<E>(self, _: u128) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_bytes<E>(self, _: &[u8]) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.depth >= MAX_DEPTH {
            return Err(too_deep());
        }
        while seq
            .next_element_seed(Skip {
                depth: self.depth + 1,
            })?
            .is_some()
        {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        if self.depth >= MAX_DEPTH {
            return Err(too_deep());
        }
        while map
            .next_key_seed(Skip {
                depth: self.depth + 1,
            })?
            .is_some()
        {
            map.next_value_seed(Skip {
                depth: self.depth + 1,
            })?;
        }
        Ok(())
    }
}
