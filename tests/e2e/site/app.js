// Runs after the stylesheet (a stylesheet blocks the scripts after it) and reports, in the DOM,
// what it can see: the browser check reads this report from --dump-dom and sees it in the
// screenshot (the status bar turns green).
'use strict';

function report(id, text) {
  const item = document.createElement('li');
  item.id = id;
  item.textContent = text;
  document.getElementById('report').appendChild(item);
}

const status = document.getElementById('status');
status.textContent = 'the script ran';
status.classList.add('ran');

// style.css paints the title's background #2b4a7a = rgb(43, 74, 122).
const titleBackground = getComputedStyle(document.getElementById('title')).backgroundColor;
report('css', 'css: ' + (titleBackground === 'rgb(43, 74, 122)' ? 'applied' : 'missing'));

window.addEventListener('load', () => {
  const images = Array.from(document.images);
  const decoded = images.filter((img) => img.complete && img.naturalWidth > 0);
  report('images', 'images: ' + decoded.length + ' of ' + images.length + ' decoded');
  // The CSS background cannot be asked whether it decoded; the origin's counts show its fetch.
  document.body.setAttribute('data-loaded', 'yes');
});
