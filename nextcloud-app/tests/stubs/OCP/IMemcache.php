<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP;

interface IMemcache extends ICache {
	public function add($key, $value, $ttl = 0);

	public function inc($key, int $step = 1);

	public function dec($key, int $step = 1);

	public function cas($key, $old, $new);

	public function cad($key, $old);
}
