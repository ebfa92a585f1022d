export * from './types.js';
export * from './errors.js';
export * from './pacer.js';
export * from './engine.js';
export { MemoryBudget } from './budget.js';
export { PartitionQueue, keyLess, MAX_PARTITIONS, type KeyedNode } from './queue.js';
export { IndexedHeap, type HeapNode } from './heap.js';
export * from './pacers/index.js';
export { TimelineRecorder, type TimelineLane, type TimelineOptions, type TimelineSample, type TimelineSpan } from './timeline.js';
