//! What CRI-O pulls from, read as its library (containers/image `sysregistriesv2`) reads it: `registries.conf`,
//! then every `*.conf` of `registries.conf.d/` in lexical order, where a `[[registry]]` with a prefix already seen
//! replaces the earlier one whole. Pure: the files are given as text, so the merge is tested from fixtures.

use std::collections::BTreeMap;

/// One `[[registry]]` table, as far as the agent needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registry {
    /// The image names it matches (`location` when unset).
    pub prefix: String,
    pub location: String,
    /// Plain HTTP (or unverified TLS) allowed.
    pub insecure: bool,
    /// Tried in order before `location`.
    pub mirrors: Vec<Mirror>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mirror {
    pub location: String,
    pub insecure: bool,
}

/// The registries a set of files defines, by prefix, each with the file it came from (the last to define it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Merged {
    pub registries: BTreeMap<String, (Registry, String)>,
}

impl Merged {
    /// `files` (name, text) merged in the order given; a file that does not parse is returned by name with the
    /// reason, as CRI-O refuses the whole configuration then.
    pub fn of<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, (String, String)> {
        let mut merged = Self::default();
        for (name, text) in files {
            for registry in parse(text).map_err(|reason| (name.to_string(), reason))? {
                merged.registries.insert(registry.prefix.clone(), (registry, name.to_string()));
            }
        }
        Ok(merged)
    }

    /// The registry whose prefix is exactly `prefix`, and the file that set it.
    pub fn get(&self, prefix: &str) -> Option<(&Registry, &str)> {
        self.registries.get(prefix).map(|(registry, file)| (registry, file.as_str()))
    }
}

/// The `[[registry]]` tables of one file (version 2 of the format; version 1's lists define no prefix).
pub fn parse(text: &str) -> Result<Vec<Registry>, String> {
    let table: toml::Table = text.parse().map_err(|error: toml::de::Error| error.message().to_string())?;
    let Some(registries) = table.get("registry") else { return Ok(Vec::new()) };
    let registries = registries.as_array().ok_or("`registry` is not an array of tables")?;
    registries.iter().map(registry).collect()
}

fn registry(value: &toml::Value) -> Result<Registry, String> {
    let table = value.as_table().ok_or("a [[registry]] that is not a table")?;
    let text = |key: &str| table.get(key).and_then(toml::Value::as_str).map(normalised);
    let location = text("location").unwrap_or_default();
    let prefix = text("prefix").filter(|p| !p.is_empty()).unwrap_or_else(|| location.clone());
    if prefix.is_empty() {
        return Err("a [[registry]] with neither prefix nor location".into());
    }
    let mirrors = match table.get("mirror") {
        None => Vec::new(),
        Some(mirrors) => mirrors
            .as_array()
            .ok_or("`mirror` is not an array of tables")?
            .iter()
            .map(|mirror| {
                let mirror = mirror.as_table().ok_or("a [[registry.mirror]] that is not a table")?;
                Ok(Mirror {
                    location: mirror.get("location").and_then(toml::Value::as_str).map(normalised).unwrap_or_default(),
                    insecure: flag(mirror, "insecure"),
                })
            })
            .collect::<Result<_, String>>()?,
    };
    Ok(Registry { prefix, location, insecure: flag(table, "insecure"), mirrors })
}

fn flag(table: &toml::Table, key: &str) -> bool {
    table.get(key).and_then(toml::Value::as_bool).unwrap_or(false)
}

/// As the library normalises a location or prefix: no scheme, no trailing slash.
fn normalised(text: &str) -> String {
    let text = text.strip_prefix("https://").or_else(|| text.strip_prefix("http://")).unwrap_or(text);
    text.trim_end_matches('/').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_file_replaces_a_prefix_whole_and_says_where_it_came_from() {
        let distribution = "unqualified-search-registries = [\"docker.io\"]\n\
            [[registry]]\nprefix = \"docker.io\"\nlocation = \"docker.io\"\n\
            [[registry.mirror]]\nlocation = \"mirror.example\"\n";
        let ours = "[[registry]]\nprefix = \"docker.io\"\nlocation = \"registry-1.docker.io\"\ninsecure = false\n";
        let merged = Merged::of([("registries.conf", distribution), ("registries.conf.d/50-ours.conf", ours)]).unwrap();
        let (registry, file) = merged.get("docker.io").unwrap();
        assert_eq!(file, "registries.conf.d/50-ours.conf");
        assert_eq!(registry.location, "registry-1.docker.io");
        assert!(registry.mirrors.is_empty(), "the earlier table's mirror is gone with it: {registry:?}");
    }

    #[test]
    fn a_prefix_defaults_to_the_location_and_schemes_and_trailing_slashes_are_dropped() {
        let text = "[[registry]]\nlocation = \"https://a.example:5000/\"\ninsecure = true\n\
            [[registry.mirror]]\nlocation = \"http://10.0.0.1:5000\"\ninsecure = true\n";
        let [registry] = parse(text).unwrap().try_into().unwrap();
        assert_eq!(
            (registry.prefix.as_str(), registry.location.as_str(), registry.insecure),
            ("a.example:5000", "a.example:5000", true)
        );
        assert_eq!(registry.mirrors, [Mirror { location: "10.0.0.1:5000".into(), insecure: true }]);
    }

    #[test]
    fn a_file_that_does_not_parse_is_named_and_one_without_registries_defines_none() {
        assert_eq!(Merged::of([("a.conf", "short-name-mode = \"enforcing\"\n")]).unwrap(), Merged::default());
        let (file, reason) = Merged::of([("a.conf", ""), ("b.conf", "[[registry]\n")]).unwrap_err();
        assert_eq!(file, "b.conf");
        assert!(!reason.is_empty());
        assert!(parse("[[registry]]\ninsecure = true\n").unwrap_err().contains("neither prefix nor location"));
    }
}
