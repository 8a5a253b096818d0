package api

// SchemaVersion of every JSON document the API serves and fencectl
// prints. It rises when a field changes meaning or goes away; new fields
// may appear within a version.
const SchemaVersion = 1
