<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\ICache;
use OCP\ICacheFactory;
use OCP\IMemcache;

/**
 * MemoryCacheFactory is Nextcloud's memory cache for tests: one store shared by every
 * cache it creates (as a distributed cache is shared by every request), keys scoped by
 * prefix, TTLs honoured against a clock the test controls.
 */
final class MemoryCacheFactory implements ICacheFactory {
	/** @var array<string, array{value: mixed, expires: int}> "prefix/key" => entry */
	public array $store = [];
	/** How often a value was read back, to prove a cache hit. */
	public int $hits = 0;

	public function __construct(
		private readonly FixedClock $clock,
	) {
	}

	public function isAvailable(): bool {
		return true;
	}

	public function isLocalCacheAvailable(): bool {
		return true;
	}

	public function createLocking(string $prefix = ''): IMemcache {
		return new MemoryCache($this, $this->clock, $prefix);
	}

	public function createDistributed(string $prefix = ''): ICache {
		return new MemoryCache($this, $this->clock, $prefix);
	}

	public function createLocal(string $prefix = ''): ICache {
		return new MemoryCache($this, $this->clock, $prefix);
	}

	/** @return list<string> every unexpired "prefix/key" */
	public function keys(): array {
		return array_keys(array_filter($this->store, fn (array $entry): bool => self::live($entry, $this->clock)));
	}

	/** @param array{value: mixed, expires: int} $entry */
	public static function live(array $entry, FixedClock $clock): bool {
		return $entry['expires'] > $clock->getTime();
	}
}
