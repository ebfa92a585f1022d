try { const c = await import('stoker/cluster'); console.log('imported; exports:', Object.keys(c)); try { await c.startClusterServer?.({}); } catch (e) { console.log('startClusterServer:', e.name, e.message.split('\n')[0]); } }
catch (e) { console.log('import failed:', e.name, e.message); }
