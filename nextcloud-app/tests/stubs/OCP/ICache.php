<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP;

interface ICache {
	public const DEFAULT_TTL = 24 * 60 * 60;

	public function get($key);

	public function set($key, $value, $ttl = 0);

	public function hasKey($key);

	public function remove($key);

	public function clear($prefix = '');

	public static function isAvailable(): bool;
}
