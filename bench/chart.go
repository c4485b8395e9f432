package bench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// palette is a small colour-blind-friendly set (Okabe-Ito).
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255},   // blue
	color.RGBA{230, 159, 0, 255},   // orange
	color.RGBA{0, 158, 115, 255},   // green
	color.RGBA{204, 121, 167, 255}, // purple
	color.RGBA{86, 180, 233, 255},  // sky
	color.RGBA{213, 94, 0, 255},    // vermillion
}

// series is one named row of values, one value per group.
type series struct {
	Name   string
	Values []float64
}

// barChart writes a grouped bar chart: one group per label, one bar per
// series.
func barChart(dir, file, title, ylabel string, groups []string, ss []series) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	w := vg.Points(math.Max(8, 60/float64(max(1, len(ss)))))
	for i, s := range ss {
		bc, err := plotter.NewBarChart(plotter.Values(s.Values), w)
		if err != nil {
			return fmt.Errorf("bench: chart %s: %w", file, err)
		}
		bc.LineStyle.Width = 0
		bc.Color = palette[i%len(palette)]
		bc.Offset = w * vg.Length(float64(i)-float64(len(ss)-1)/2)
		p.Add(bc)
		p.Legend.Add(s.Name, bc)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.NominalX(groups...)
	p.Y.Max *= 1.3 // room for the legend above the tallest bars
	return save(p, dir, file)
}

// lineChart writes one line per series over shared x values.
func lineChart(dir, file, title, xlabel, ylabel string, xs []float64, ss []series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	for i, s := range ss {
		pts := make(plotter.XYs, 0, len(xs))
		for j, x := range xs {
			if j < len(s.Values) && !math.IsNaN(s.Values[j]) {
				pts = append(pts, plotter.XY{X: x, Y: s.Values[j]})
			}
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("bench: chart %s: %w", file, err)
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		sc.Color = palette[i%len(palette)]
		p.Add(l, sc)
		p.Legend.Add(s.Name, l, sc)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Y.Max *= 1.2
	return save(p, dir, file)
}

// histogram writes the distribution of values in n bins.
func histogram(dir, file, title, xlabel string, values []float64, n int) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "count"
	h, err := plotter.NewHist(plotter.Values(values), n)
	if err != nil {
		return fmt.Errorf("bench: chart %s: %w", file, err)
	}
	h.FillColor = palette[0]
	h.LineStyle.Width = 0
	p.Add(h)
	return save(p, dir, file)
}

func save(p *plot.Plot, dir, file string) error {
	if err := p.Save(16*vg.Centimeter, 9*vg.Centimeter, filepath.Join(dir, file)); err != nil {
		return fmt.Errorf("bench: chart %s: %w", file, err)
	}
	return nil
}

// addChart draws one chart into e.chartDir and lists it in s. A chart that
// cannot be drawn is noted, not fatal: the tables carry the figures anyway.
func (e *env) addChart(s *Section, file, caption string, draw func(dir, file string) error) {
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("plot: %v", p)
			}
		}()
		return draw(e.chartDir, file)
	}()
	if err != nil {
		s.note("chart %s not drawn: %v", file, err)
		return
	}
	s.Charts = append(s.Charts, Chart{File: file, Caption: caption})
}
