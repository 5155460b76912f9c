// Package api holds the types gpuslice components share across process
// boundaries: the extended resource names pods request, the pod assignment
// annotation the scheduler writes, and the GPUNode resource table (CRD) the
// node side publishes. Every serialized form carries a version and is decoded
// strictly.
package api
