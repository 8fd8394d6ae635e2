"""The status page served at `/`: one self-contained HTML document (no external assets)."""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>logwatch</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;width:100%}th,td{padding:.35em .6em;border-bottom:1px solid #ddd;text-align:left}
.ready{color:#176f2c;font-weight:600}.crashed{color:#b00020;font-weight:600}.stopped{color:#8a6d00}
</style></head><body>
<h1>logwatch</h1>
<p><a href="/metrics">/metrics</a> &middot; <a href="/api/status">/api/status</a></p>
<table><thead><tr><th>target</th><th>engine</th><th>phase</th><th>shards</th><th>ETA</th><th>last line</th></tr></thead>
<tbody id="rows"></tbody></table>
<script>
function td(t,c){const e=document.createElement('td');e.textContent=t==null?'':String(t);if(c)e.className=c;return e}
async function refresh(){
  try{const r=await fetch('/api/status');const d=await r.json();const tb=document.getElementById('rows');tb.replaceChildren();
    for(const t of d.targets){const tr=document.createElement('tr');
      tr.append(td(t.name),td(t.engine),td(t.phase,t.phase),td(t.shards?t.shards.loaded+'/'+t.shards.total:''),
        td(t.eta_seconds==null?'':Math.round(t.eta_seconds)+'s'),td(t.last_line));tb.append(tr)}}catch(e){}
}
refresh();setInterval(refresh,2000);
</script></body></html>
"""
