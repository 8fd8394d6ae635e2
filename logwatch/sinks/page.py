"""The status page served at `/`: a fleet view in one self-contained HTML document.

No external assets (it works offline, next to the GPUs).  It polls `/api/status` once per
refresh for all targets (never one request per target), keeps one row per target and only
rewrites what changed, so 500 targets stay cheap.  Every piece of log text goes through
`textContent`: log lines are untrusted input and are never parsed as HTML.
"""

PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>logwatch</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
:root{--ok:#1a7f37;--bad:#cf222e;--warn:#9a6700;--mute:#6e7781;--line:#d8dee4}
*{box-sizing:border-box}
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1f2328;background:#f6f8fa}
header{display:flex;gap:1.5em;align-items:baseline;padding:.8em 1.2em;background:#fff;border-bottom:1px solid var(--line)}
header h1{font-size:1.2em;margin:0}
header .counts span{margin-right:1em}
.count.bad{color:var(--bad);font-weight:600}.count.none{color:var(--mute)}
header a{color:var(--mute)}
main{padding:1em 1.2em}
.target{background:#fff;border:1px solid var(--line);border-radius:6px;margin-bottom:.8em;padding:.7em .9em}
.head{display:grid;grid-template-columns:minmax(10em,1.4fr) 6em 9em minmax(14em,2fr) 8em 7em;gap:.8em;align-items:center}
.name{font-weight:600;word-break:break-all}
.labels{color:var(--mute);font-size:.8em;font-weight:400}
.gpu{font-size:.85em;color:var(--mute);display:flex;gap:.5em;align-items:center}.gpu.down{color:#c60}.gpu[hidden]{display:none}
details.launches{font-size:.85em;margin-top:.3em}details.launches table{border-collapse:collapse}
details.launches td,details.launches th{padding:.1em .6em;text-align:left;border-bottom:1px solid #8883}
.spark{display:flex;align-items:flex-end;gap:1px;width:120px;height:18px}.spark i{flex:1;background:currentColor;min-width:1px}
.tps{text-align:right;font-variant-numeric:tabular-nums}
.engine{color:var(--mute)}
.phase{font-weight:600}
.phase.ready{color:var(--ok)}.phase.crashed{color:var(--bad)}.phase.stopped,.phase.stalled{color:var(--warn)}
.target.silent{background:#eef0f2;color:var(--mute)}.phase.silent{color:var(--mute)}
.bar{position:relative;height:1.2em;background:#eaeef2;border-radius:3px;overflow:hidden}
.bar .fill{position:absolute;left:0;top:0;bottom:0;background:#54aeff}
.bar .txt{position:relative;padding-left:.4em;font-size:.85em;white-space:nowrap}
.since{color:var(--mute);font-size:.9em;text-align:right}
.crash{margin-top:.5em;border-left:3px solid var(--bad);padding:.3em .6em;background:#fff5f5}
.crash .reason{font-weight:600;color:var(--bad)}
.crash .when{color:var(--mute);font-size:.9em}
.crash .line,.last,pre{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.85em;white-space:pre-wrap;word-break:break-all}
pre{max-height:22em;overflow:auto;background:#f6f8fa;padding:.5em;margin:.3em 0 0}
.last{color:var(--mute);margin-top:.3em;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.timeline{margin-top:.5em;font-size:.8em}
.tl{display:flex;align-items:center;gap:.5em;margin:.15em 0}
.tl .label{width:6em;color:var(--mute);flex:none}
.tl .lane{display:flex;flex:1;height:1.1em;background:#eaeef2;border-radius:2px;overflow:hidden}
.seg{flex:none;min-width:0;height:100%;overflow:hidden;white-space:nowrap;color:#fff;font-size:.85em;text-indent:.25em;box-shadow:inset -1px 0 #fff}
.seg.other{background:#57606a}
.seg.gap{background:transparent;box-shadow:none}
.tl .total{width:5em;text-align:right;color:var(--mute);flex:none}
.tl .outcome{width:14em;flex:none;color:var(--mute);overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.tl .outcome.crashed{color:var(--bad)}.tl .outcome.ready{color:var(--ok)}
.src{font-size:.85em;color:var(--warn)}.src.bad{color:var(--bad);font-weight:600}
.probe{font-size:.85em;color:var(--mute)}.probe.ok{color:var(--ok)}.probe.bad{color:var(--bad);font-weight:600}.probe[hidden],.ranks[hidden]{display:none}
.ranks{font-size:.85em;color:var(--warn);font-weight:600}
.degraded{font-size:.85em;color:var(--warn);border-left:3px solid var(--warn);padding:.1em .6em}.degraded[hidden],.crash .meaning:empty{display:none}
.crash .meaning{margin:.2em 0}
#err{color:var(--bad);padding:0 1.2em}
body.stale #targets{opacity:.45}
.tools{display:flex;gap:.6em;align-items:center;padding:.5em 1.2em;background:#fff;border-bottom:1px solid var(--line);font-size:.9em}
.tools input[type=search]{width:22em;padding:.2em .4em}.tools .hint{color:var(--mute)}
.count{cursor:pointer}.count.active{text-decoration:underline;outline:1px solid currentColor;padding:0 .2em}
.target.bad{border-left:4px solid var(--bad)}.target.focus{box-shadow:0 0 0 2px #0969da}
.name a{color:inherit;text-decoration:none}.name a:hover{text-decoration:underline}
.group{font-weight:600;color:var(--mute);margin:1em 0 .3em;font-size:.9em}.group[hidden]{display:none}
.brief{display:none;color:var(--mute);font-size:.85em;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.target.bad .brief{color:var(--bad)}
body.compact .target{padding:.15em .6em;margin-bottom:2px;border-radius:0}
body.compact .target>:not(.head){display:none}
body.compact .head{grid-template-columns:minmax(10em,1.2fr) 5em 11em minmax(10em,1.4fr) 7em 6em minmax(12em,2.4fr)}
body.compact .brief{display:block}body.compact .labels{display:inline;margin-left:.5em}
body.compact .head>*{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
</style></head><body>
<header><h1>logwatch</h1><div class="counts" id="counts"></div>
<div><a href="/metrics">/metrics</a> &middot; <a href="/api/status">/api/status</a></div>
<div id="updated" style="margin-left:auto;color:var(--mute)"></div></header>
<div class="tools"><input id="q" type="search" placeholder="/ filter: name or label (model=..., cluster=...)" aria-label="filter">
<label>sort <select id="sort"><option value="status">status</option><option value="name">name</option><option value="phase">phase</option><option value="eta">ETA</option></select></label>
<label>group by <select id="group"><option value="">nothing</option></select></label>
<label><input id="compact" type="checkbox"> compact</label>
<span class="hint" id="shown"></span></div>
<div id="err"></div>
<main id="targets"></main>
<script>
"use strict";
const BAD=["error","stalled","crashed","unreachable","silent"];   // counted first, in red
const rows=new Map(),groups=new Map();
const PIN={error:0,crashed:1,silent:2,stalled:3,unreachable:4};   // bad states, pinned on top
// the view's state lives in the URL's hash: a link (a permalink to a target) opens the same view
const view={q:"",sort:"status",group:"",only:"",compact:null,target:""};
function readHash(){const h=new URLSearchParams(location.hash.slice(1));view.q=h.get("q")||"";
  view.sort=h.get("sort")||"status";view.group=h.get("group")||"";view.only=h.get("status")||"";
  view.compact=h.has("compact")?h.get("compact")==="1":null;view.target=h.get("target")||""}
function writeHash(){const h=new URLSearchParams();if(view.q)h.set("q",view.q);if(view.sort!=="status")h.set("sort",view.sort);
  if(view.group)h.set("group",view.group);if(view.only)h.set("status",view.only);if(view.compact!==null)h.set("compact",view.compact?"1":"0");
  if(view.target)h.set("target",view.target);const s=h.toString();history.replaceState(null,"",s?"#"+s:location.pathname)}
function el(tag,cls,text){const e=document.createElement(tag);if(cls)e.className=cls;if(text!=null)e.textContent=String(text);return e}
function dur(s){if(s==null||!isFinite(s))return"";s=Math.round(s);if(s<60)return s+"s";const m=Math.floor(s/60),r=s%60;
  if(m<60)return m+"m"+String(r).padStart(2,"0")+"s";return Math.floor(m/60)+"h"+String(m%60).padStart(2,"0")+"m"}
function ago(s){s=Math.max(0,Math.round(s));if(s<60)return s+"s";if(s<3600)return Math.floor(s/60)+"m";
  if(s<86400)return Math.floor(s/3600)+"h";return Math.floor(s/86400)+"d"}
function clock(t){const d=new Date(t*1000);return [d.getHours(),d.getMinutes(),d.getSeconds()].map(x=>String(x).padStart(2,"0")).join(":")}
function total(durations){return Object.values(durations||{}).reduce((a,b)=>a+(b>0?b:0),0)}
function set(node,text){text=text==null?"":String(text);if(node.textContent!==text)node.textContent=text}
function makeRow(name){
  const r={root:el("section","target")};r.root.dataset.target=name;
  const h=el("div","head");r.name=el("div","name");const a=el("a",null,name);a.href="#target="+encodeURIComponent(name);
  a.title="permalink to "+name;a.addEventListener("click",ev=>{ev.preventDefault();view.target=view.target===name?"":name;writeHash();layout(true)});
  r.name.append(a);r.labels=el("div","labels");r.name.append(r.labels);r.brief=el("div","brief");
  r.engine=el("div","engine");r.phase=el("div","phase");
  r.bar=el("div","bar");r.fill=el("div","fill");r.bartxt=el("span","txt");r.bar.append(r.fill,r.bartxt);
  r.since=el("div","since");r.tps=el("div","tps");h.append(r.name,r.engine,r.phase,r.bar,r.since,r.tps,r.brief);
  r.src=el("div","src");r.crash=el("div","crash");r.crash.hidden=true;
  r.probe=el("div","probe");r.probe.hidden=true;r.ranks=el("div","ranks");r.ranks.hidden=true;
  r.degraded=el("div","degraded");r.degraded.hidden=true;r.meaning=el("div","meaning");
  r.reason=el("div","reason");r.when=el("div","when");r.line=el("div","line");r.det=el("details");r.det.append(el("summary",null,"excerpt"));
  r.pre=el("pre");r.det.append(r.pre);r.crash.append(r.reason,r.meaning,r.when,r.line,r.det);
  r.timeline=el("div","timeline");r.last=el("div","last");
  r.gpu=el("div","gpu");r.gpu.hidden=true;r.gputxt=el("span","gputxt");
  r.spark=el("div","spark");r.spark.title="total GPU power, last samples (full height: the power limit)";
  r.gpu.append(r.spark,r.gputxt);
  r.launches=el("details","launches");r.launches.append(el("summary",null,"launches"));
  r.ltable=el("table");r.launches.append(r.ltable);
  r.launches.addEventListener("toggle",()=>{if(r.launches.open)launches(name,r.ltable)});
  r.root.append(h,r.src,r.probe,r.ranks,r.degraded,r.gpu,r.crash,r.timeline,r.last,r.launches);return r}
// a flag's value as the engine prints it (args.flag_value_text): None, True, 64, a plain string bare
function pyQuote(s){return s.includes("'")&&!s.includes('"')?'"'+s.replace(/\\/g,"\\\\")+'"':"'"+s.replace(/\\/g,"\\\\").replace(/'/g,"\\'")+"'"}
function pyRepr(v){if(v===null||v===undefined)return "None";if(typeof v==="boolean")return v?"True":"False";
  if(typeof v==="string")return pyQuote(v);if(Array.isArray(v))return "["+v.map(pyRepr).join(", ")+"]";
  if(typeof v==="object")return "{"+Object.entries(v).map(([k,x])=>pyQuote(k)+": "+pyRepr(x)).join(", ")+"}";
  return String(v)}
function flagText(v){
  if(typeof v==="string"&&v&&!/[\s,'"]/.test(v)&&!/^(None|True|False|true|false|null|[+-]?[\d.]+([eE][+-]?\d+)?|[+-]?(inf|infinity|nan))$/i.test(v))return v;
  return pyRepr(v)}
// the target's launch ledger (/api/history): when, outcome, startup time, tok/s, flags changed
async function launches(name,table){
  let d;try{const res=await fetch("/api/history?target="+encodeURIComponent(name),{cache:"no-store"});d=await res.json()}
  catch(e){return}
  table.replaceChildren();const head=el("tr");
  for(const c of ["#","when","outcome","startup","tok/s p50","flags changed"])head.append(el("th",null,c));table.append(head);
  for(const s of (d.startups||[]).slice().reverse()){const tr=el("tr");tr.dataset.startup=s.index;
    const g=s.serving&&s.serving.gen_throughput;
    const ch=Object.entries(s.changed||{}).map(([k,v])=>k+" "+flagText(v[0])+" -> "+flagText(v[1])).join(", ");
    for(const c of [s.index,s.started_stamp||"",s.outcome+(s.reason?": "+s.reason:""),
      s.startup_seconds!=null?dur(s.startup_seconds):"",g&&g.p50!=null?Math.round(g.p50):"",ch])tr.append(el("td",null,c));
    table.append(tr)}}
// the host's total GPU power over its last samples as bars, full height = its power limit
function spark(box,values,limit){const last=values.slice(-60),top=Math.max(limit||0,...last,1);
  while(box.children.length>last.length)box.lastChild.remove();
  while(box.children.length<last.length)box.append(el("i"));
  last.forEach((v,i)=>{box.children[i].style.height=Math.max(1,100*v/top).toFixed(1)+"%"})}
// one lane of the timeline; `scale` (seconds) is the full width, shared by both lanes
// `parts`: [phase, seconds] in order (one per span, or per phase); phase null: empty time;
// `col`: the pack's phase colours (`colours:` in rules/*.yaml; a phase without one is grey)
function lane(label,parts,scale,totalText,outcome,outcomeCls,col){
  const row=el("div","tl");row.dataset.lane=label;row.append(el("span","label",label));const ln=el("div","lane");
  for(const [p,d] of parts){if(!(d>0))continue;
    const s=el("div","seg "+(p===null?"gap":col[p]?p:"other"));s.style.width=(100*d/Math.max(scale,1e-9))+"%";
    if(p!==null&&col[p])s.style.background=col[p];
    if(p!==null){s.title=p+" "+dur(d);s.textContent=p+" "+dur(d)}ln.append(s)}
  row.append(ln,el("span","total",totalText),el("span","outcome"+(outcomeCls?" "+outcomeCls:""),outcome||""));return row}
function brief(t){const s=t.source_state||{},c=t.crash;
  if(t.silent)return t.silent;if(s.error||s.fatal)return "source: "+(s.message||"down");
  if(c)return c.reason+" during "+c.during+(c.replica?" in "+c.replica:"");if(t.status==="unreachable"&&t.probe)return "endpoint: "+(t.probe.verdict||"not answering");
  if(t.rank_lag)return t.rank_lag;if(!s.up)return s.message||"";return t.last_line||""}
function update(r,t,now){
  r.t=t;r.root.classList.toggle("bad",(t.status||"") in PIN);set(r.brief,brief(t));
  set(r.engine,t.engine);const pr=t.probe,deaf=t.status==="unreachable";
  const dead=t.status==="silent";r.root.classList.toggle("silent",dead);   // greyed: no ETA, no "in phase"
  const down=t.status==="error";   // the source fails: not "waiting" (its row is red, counted as error)
  set(r.phase,dead?t.phase+" (silent)":down?(t.phase==="waiting"?"source error":t.phase+" (source error)")
    :t.stalled&&t.phase!=="crashed"?t.phase+" (stalled)":deaf?"ready in log, not answering":t.phase);
  r.phase.className="phase "+(dead?"silent":t.stalled||deaf||down?"stalled":t.phase);
  r.probe.hidden=!(pr&&pr.verdict);
  if(pr&&pr.verdict){set(r.probe,"endpoint: "+pr.verdict);r.probe.className="probe"+(pr.up===true&&t.phase!=="crashed"?" ok":pr.up===false&&(t.phase==="ready"||deaf)?" bad":"")}
  r.ranks.hidden=!t.rank_lag;set(r.ranks,t.rank_lag?"ranks: "+t.rank_lag:"");
  // a part of the server that failed while it starts or serves (a PD bootstrap server): not a crash
  r.degraded.hidden=!t.degraded;set(r.degraded,t.degraded?"degraded: "+t.degraded:"");
  set(r.labels,Object.entries(t.labels||{}).map(([k,v])=>k+"="+v).join(" "));
  const sh=t.shards,p=t.progress&&t.progress.shards;
  if(sh&&sh.total){const pct=Math.min(100,100*sh.loaded/sh.total);r.fill.style.width=pct+"%";
    let txt=sh.loaded+"/"+sh.total+" shards";if(p&&p.rate)txt+=" · "+p.rate.toFixed(2)+"/s";
    if(t.eta_seconds!=null&&t.phase!=="ready")txt+=" · ETA "+dur(t.eta_seconds);set(r.bartxt,txt)}
  else{r.fill.style.width="0%";set(r.bartxt,t.eta_seconds!=null&&t.phase!=="ready"&&t.phase!=="waiting"?"ETA "+dur(t.eta_seconds):"")}
  set(r.since,dead?t.silent:t.phase==="ready"&&!deaf&&t.ready_in_seconds!=null?"ready in "+dur(t.ready_in_seconds)
    :t.in_phase_seconds!=null?"in phase "+dur(t.in_phase_seconds):"");
  const g=t.stats&&t.stats.gen_throughput;set(r.tps,t.phase==="ready"&&g!=null?Math.round(g)+" tok/s":"");
  const s=t.source_state||{};set(r.src,s.up?"":"source: "+(s.message||"down"));
  r.src.className="src"+(s.error?" bad":"");
  if(t.crash){r.crash.hidden=false;set(r.reason,(t.crash.text||"crashed: "+t.crash.reason)+" · line "+t.crash.line_number);
    set(r.when,t.crash.at!=null?"crashed "+clock(t.crash.at)+", "+ago(now-t.crash.at)+" ago":"");
    set(r.meaning,t.crash.meaning||"");set(r.line,t.crash.line);set(r.pre,(t.crash.excerpt||[]).join("\n"))}else{r.crash.hidden=true}
  const prev=t.previous_startup,cur=t.durations||{},spans=t.spans||[];
  const key=JSON.stringify([cur,spans,t.phase,t.ready_in_seconds,prev&&prev.at]);
  if(r.tlkey!==key){r.tlkey=key;r.timeline.replaceChildren();
    // the startup's spans in order (a phase that came back is a second segment); spans that
    // ran beside them on a lane of their own, placed at their start
    const main=spans.filter(s=>!s.beside).map(s=>[s.phase,s.seconds]),side=[];let at=0;
    for(const s of spans.filter(s=>s.beside)){side.push([null,(s.start||0)-at],[s.phase,s.seconds]);at=(s.start||0)+(s.seconds||0)}
    const col=t.phase_colours||{},hasCur=Object.keys(cur).length>0,nowT=t.total_seconds!=null?t.total_seconds:total(cur),
      prevT=prev?total(prev.phases):0,scale=Math.max(nowT,prevT);
    if(hasCur)r.timeline.append(lane("now",main.length?main:Object.entries(cur),scale,t.ready_in_seconds!=null?dur(t.ready_in_seconds):dur(nowT),t.phase,null,col));
    if(hasCur&&side.length)r.timeline.append(lane("beside",side,scale,"","",null,col));
    if(prev)r.timeline.append(lane("previous",Object.entries(prev.phases),scale,dur(prev.total!=null?prev.total:prevT),
      prev.outcome==="crashed"?"crashed"+(prev.reason?": "+prev.reason:""):prev.outcome,prev.outcome,col))}
  const gpu=t.gpu;r.gpu.hidden=!gpu;
  if(gpu){const snap=gpu.up?gpu.snapshot:null;r.gpu.className="gpu"+(snap?"":" down");
    set(r.gputxt,(snap?snap.summary:"GPU: "+(gpu.status||"starting"))
      +(gpu.silence?" — silent: "+gpu.silence.text:""));
    let limit=0;if(snap)for(const g of snap.gpus)limit+=g.power_limit_w||0;
    spark(r.spark,snap?(gpu.power_history_w||[]):[],limit)}
  set(r.last,t.last_line||"")}
// a daemon that accepts and never answers (stopped, hung, a network dropping packets) left the
// page as it was, looking current: one poll at a time; one that has waited STALE_AFTER ms dims
// the rows and the page says since when it has no answer; it gives up after POLL_WAIT ms (a
// dead connection).  A slow but healthy daemon (a big fleet's 5 s answer) is waited for: a
// poll cut at 5 s never showed one of its answers.  A daemon that always takes 8 s is not
// said "no answer" at each poll's 6th second (the banner came and went every 8 s): the wait
// before saying so is twice the longest of its last TOOK_KEPT answers' times (STALE_AFTER at
// least, POLL_WAIT at most): one answer's time alone let answers of 2.5 s and 7 s in turn say
// "no answer" after every short one (helper adv37)
const POLL_WAIT=30000,STALE_AFTER=6000,TOOK_KEPT=10;let lastOk=Date.now(),polling=0,took=[0];
const patience=()=>Math.min(POLL_WAIT,Math.max(STALE_AFTER,2*Math.max(...took)));
function stale(why){const age=Math.round((Date.now()-lastOk)/1000),old=age*1000>=patience();
  document.body.classList.toggle("stale",old);
  set(document.getElementById("err"),why+(old?" — no answer for "+age+" s: what is shown is from "+new Date(lastOk).toLocaleTimeString():""))}
async function refresh(){
  let d;const ac=new AbortController(),timer=setTimeout(()=>ac.abort(),POLL_WAIT);
  try{const res=await fetch("/api/status",{cache:"no-store",signal:ac.signal});d=await res.json()}
  catch(e){stale(ac.signal.aborted?"the daemon does not answer":"cannot reach the daemon: "+e);return}
  finally{clearTimeout(timer)}
  lastOk=Date.now();if(polling)took=[...took,lastOk-polling].slice(-TOOK_KEPT);
  document.body.classList.remove("stale");set(document.getElementById("err"),"")
  const box=document.getElementById("targets"),seen=new Set(),count={};
  for(const t of d.targets){seen.add(t.name);const k=t.status||t.phase;count[k]=(count[k]||0)+1;
    let r=rows.get(t.name);if(!r){r=makeRow(t.name);rows.set(t.name,r);box.append(r.root)}update(r,t,d.now)}
  for(const [n,r] of rows)if(!seen.has(n)){r.root.remove();rows.delete(n)}
  const c=document.getElementById("counts");c.replaceChildren();
  const pick=(e,k)=>{e.title="show only "+(k||"every target");if(view.only===k&&k)e.classList.add("active");
    e.addEventListener("click",()=>{view.only=view.only===k?"":k;writeHash();layout(true);refreshCounts()})};
  for(const k of BAD){const n=count[k]||0,e=el("span","count "+(n?"bad":"none"),n+" "+k);e.id="count-"+k;e.dataset.count=k;e.dataset.n=n;pick(e,k);c.append(e)}
  const tot=el("span","count",d.targets.length+" targets");tot.id="count-targets";pick(tot,"");c.append(tot);
  for(const [p,n] of Object.entries(count).sort())if(!BAD.includes(p)){const e=el("span","count phase "+p,n+" "+p);e.dataset.count=p;e.dataset.n=n;pick(e,p);c.append(e)}
  labelKeys(d.targets);layout(false);
  set(document.getElementById("updated"),"updated "+new Date(d.now*1000).toLocaleTimeString())}
function refreshCounts(){for(const e of document.querySelectorAll("#counts .count"))
  e.classList.toggle("active",!!view.only&&e.dataset.count===view.only)}
// the label keys seen, offered to group by (cluster, model, ...)
function labelKeys(targets){const sel=document.getElementById("group"),keys=new Set();
  for(const t of targets)for(const k of Object.keys(t.labels||{}))keys.add(k);
  const have=new Set([...sel.options].map(o=>o.value));
  for(const k of [...keys].sort())if(!have.has(k)){const o=el("option",null,k);o.value=k;sel.append(o)}
  sel.value=view.group}
function rankOf(t){const s=t.status||t.phase;if(s in PIN)return PIN[s];
  if(s==="ready")return 30;if(s==="waiting"||s==="stopped")return 20;return 10}
function cmp(a,b){const ta=a.t,tb=b.t,pa=(ta.status||"") in PIN,pb=(tb.status||"") in PIN;
  if(pa!==pb)return pa?-1:1;if(pa&&pb&&PIN[ta.status]!==PIN[tb.status])return PIN[ta.status]-PIN[tb.status];
  let k=0;if(view.sort==="status")k=rankOf(ta)-rankOf(tb);
  else if(view.sort==="phase")k=(ta.phases_seen||[]).length-(tb.phases_seen||[]).length||String(ta.phase).localeCompare(String(tb.phase));
  else if(view.sort==="eta"){const ea=ta.eta_seconds==null?Infinity:ta.eta_seconds,eb=tb.eta_seconds==null?Infinity:tb.eta_seconds;k=ea===eb?0:ea<eb?-1:1}
  return k||String(ta.name).localeCompare(String(tb.name))}
function matches(t){if(view.only&&(t.status||t.phase)!==view.only)return false;if(view.target&&t.name!==view.target&&!view.q)return true;
  if(!view.q)return true;const hay=(t.name+" "+Object.entries(t.labels||{}).map(([k,v])=>k+"="+v+" "+v).join(" ")).toLowerCase();
  return view.q.toLowerCase().split(/\s+/).filter(Boolean).every(w=>hay.includes(w))}
// order the rows (bad pinned on top, then the chosen sort; by group when asked), hide the
// ones the filter leaves out; only moves the nodes whose place changed
function layout(scroll){const box=document.getElementById("targets"),list=[...rows.values()].filter(r=>r.t);
  const compact=view.compact!==null?view.compact:list.length>30;document.body.classList.toggle("compact",compact);
  document.getElementById("compact").checked=compact;
  let shown=0;for(const r of list){const ok=matches(r.t);r.root.hidden=!ok;if(ok)shown++;r.root.classList.toggle("focus",r.t.name===view.target)}
  list.sort(cmp);const seq=[];
  if(view.group){const by=new Map();for(const r of list){const g=(r.t.labels||{})[view.group]||"(no "+view.group+")";if(!by.has(g))by.set(g,[]);by.get(g).push(r)}
    const order=[...by.entries()].sort((a,b)=>cmp(a[1][0],b[1][0])||a[0].localeCompare(b[0]));
    for(const [g,rs] of order){let h=groups.get(g);if(!h){h=el("div","group");groups.set(g,h)}
      const vis=rs.filter(r=>!r.root.hidden).length,bad=rs.filter(r=>(r.t.status||"") in PIN).length;
      set(h,view.group+"="+g+" · "+rs.length+" targets"+(bad?" · "+bad+" need a look":""));h.hidden=!vis;seq.push(h,...rs.map(r=>r.root))}}
  else seq.push(...list.map(r=>r.root));
  seq.forEach((n,i)=>{if(box.children[i]!==n)box.insertBefore(n,box.children[i]||null)});
  while(box.children.length>seq.length)box.lastChild.remove();
  set(document.getElementById("shown"),shown===list.length?"":shown+" of "+list.length+" shown");
  if(scroll&&view.target){const r=rows.get(view.target);if(r)r.root.scrollIntoView({block:"center"})}}
readHash();
(function(){const q=document.getElementById("q"),so=document.getElementById("sort"),gr=document.getElementById("group"),co=document.getElementById("compact");
  q.value=view.q;so.value=view.sort;
  q.addEventListener("input",()=>{view.q=q.value.trim();writeHash();layout(false)});
  so.addEventListener("change",()=>{view.sort=so.value;writeHash();layout(false)});
  gr.addEventListener("change",()=>{view.group=gr.value;writeHash();layout(false)});
  co.addEventListener("change",()=>{view.compact=co.checked;writeHash();layout(false)});
  document.addEventListener("keydown",ev=>{if(ev.key==="/"&&document.activeElement!==q){ev.preventDefault();q.focus();q.select()}
    else if(ev.key==="Escape"&&document.activeElement===q){q.value="";view.q="";writeHash();layout(false);q.blur()}});
  window.addEventListener("hashchange",()=>{readHash();q.value=view.q;so.value=view.sort;layout(true);refreshCounts()})})();
let first=true;
async function tick(){if(polling){if(Date.now()-polling>=patience())stale("the daemon does not answer");return}
  polling=Date.now();try{await refresh()}finally{polling=0}
  if(first&&rows.size){first=false;layout(true)}}
tick();setInterval(tick,2000);
</script></body></html>
"""
