// A fragment that appears below (or above) what a scrolling slide shows is scrolled into view.
function bringIntoView(fragment) {
  var box = fragment.parentElement;
  while (box && !(box.scrollHeight > box.clientHeight && /auto|scroll/.test(getComputedStyle(box).overflowY))) {
    box = box.parentElement;
  }
  if (!box) return;
  var scale = box.getBoundingClientRect().height / box.offsetHeight || 1;  // reveal.js scales the slides
  var outer = box.getBoundingClientRect(), inner = fragment.getBoundingClientRect();
  var below = (inner.bottom - outer.bottom) / scale, above = (outer.top - inner.top) / scale;
  if (inner.height > outer.height || above > 0) {
    box.scrollTop -= above;  // its top in view
  } else if (below > 0) {
    box.scrollTop += below;  // all of it in view
  }
}
Reveal.on("fragmentshown", function (event) {
  bringIntoView(event.fragment);
});
