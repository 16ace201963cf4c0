// The ES module entry of checkpointd-client/langgraph: the CommonJS module's exports, by name
// (tests/packaging/test_node_package.py checks that every export is here).
import langgraph from './index.js';

export const { CheckpointdSaver, GraphResumeWorker, ResumeRefused, resumeFor, resumeValue } = langgraph;
