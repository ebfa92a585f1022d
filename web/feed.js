// The event stream (GET v1/events): the feed of job events; pacer events go to `onPacer`.
import { currentToken, setConnection } from './api.js';
import { $, clock, el } from './format.js';
import { refreshJobsSoon } from './jobs.js';

const EVENT_TYPES = ['job.submitted', 'job.started', 'job.partition', 'step.failed', 'job.done', 'job.failed', 'job.cancelled', 'device.measurement', 'pacer', 'gap'];
const FEED_MAX = 40;

function feed(e) {
  const list = $('events');
  const time = clock(Date.parse(e.time) / 1000);
  // device.measurement: the pacer found a device's busy time misleading (its reason names the device and the cause).
  const detail = e.type === 'job.submitted' ? `${e.kind}, ${e.partitions} partitions` : e.type === 'step.failed' ? `partition ${e.partition} (attempt ${e.attempt}) ${e.stage === 'device' ? `on ${e.device}/${e.worker}` : 'in preparation'}: ${e.reason} — ${e.retried ? 'prepared again' : 'its job fails'}` : e.type === 'gap' ? `events missed while disconnected: ${e.reason}` : e.type === 'device.measurement' ? e.reason : e.reason ? `${e.code}: ${e.reason}` : '';
  // (A failed step that is tried again is a warning, not a failed job.)
  const cls = e.type === 'step.failed' ? (e.retried ? 'ev-retried' : 'ev-failed') : `ev-${e.type.split('.')[1] ?? e.type}`;
  const li = el('li', { class: cls }, el('span', { class: 't', text: time }), `${e.type} ${e.id ?? ''} ${detail}`);
  list.prepend(li);
  while (list.children.length > FEED_MAX) list.lastElementChild.remove();
}

let events = null;
export function connectEvents(onPacer) {
  events?.close();
  const es = new EventSource(`v1/events${currentToken() ? `?access_token=${encodeURIComponent(currentToken())}` : ''}`);
  events = es;
  es.onopen = () => setConnection('live', 'live');
  es.onerror = () => setConnection('down', 'reconnecting…');
  for (const type of EVENT_TYPES) {
    es.addEventListener(type, (msg) => {
      const e = JSON.parse(msg.data);
      if (type === 'pacer') {
        onPacer(e);
        return;
      }
      if (type !== 'job.partition') feed(e);
      if (type !== 'device.measurement') refreshJobsSoon();
    });
  }
}
