<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Migration;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Service\AdminService;
use OCP\IAppConfig;
use OCP\Migration\IOutput;
use OCP\Migration\IRepairStep;
use Psr\Log\LoggerInterface;

/**
 * MoveAllowedGroupsToSidecar carries the app's old "allowed_groups" setting over to the
 * sidecar, which now decides who may use the bot (docs/user-api.md, "Access"). Dropping
 * the old key without carrying it over would open the bot to every user, so the key is
 * deleted only once the sidecar holds the groups (or already held its own list); while
 * the sidecar cannot be reached the key stays and the next upgrade tries again, and the
 * admin is told what to set by hand.
 */
class MoveAllowedGroupsToSidecar implements IRepairStep {
	public const LEGACY_KEY = 'allowed_groups';

	public function __construct(
		private readonly IAppConfig $appConfig,
		private readonly AdminService $admin,
		private readonly LoggerInterface $logger,
	) {
	}

	public function getName(): string {
		return 'Move the Istota access groups to the sidecar';
	}

	public function run(IOutput $output): void {
		if (!$this->appConfig->hasKey(Application::APP_ID, self::LEGACY_KEY)) {
			return;
		}
		$groups = $this->legacyGroups();
		if ($groups === []) {
			$this->appConfig->deleteKey(Application::APP_ID, self::LEGACY_KEY);
			return;
		}
		try {
			$current = $this->admin->settings();
			$existing = $current['settings']['access']['groups'] ?? [];
			if (is_array($existing) && $existing !== []) {
				$output->info(sprintf('The sidecar already limits Istota to the groups %s; the app\'s old list (%s) is dropped.', implode(', ', array_map('strval', $existing)), implode(', ', $groups)));
			} else {
				$this->admin->updateSettings(['access' => ['groups' => $groups]]);
				$output->info(sprintf('Istota access groups moved to the sidecar: %s', implode(', ', $groups)));
			}
		} catch (\Throwable $e) {
			$this->logger->warning('Could not move the Istota access groups to the sidecar', ['exception' => $e]);
			$output->warning(sprintf(
				'Could not move the Istota access groups (%s) to the sidecar; they are kept and moved on the next upgrade. Until then set them in Administration → Istota → Access.',
				implode(', ', $groups),
			));
			return;
		}
		$this->appConfig->deleteKey(Application::APP_ID, self::LEGACY_KEY);
	}

	/**
	 * The old value: a JSON list in a string (or an array-typed value), group ids only.
	 *
	 * @return list<string>
	 */
	private function legacyGroups(): array {
		try {
			$decoded = json_decode($this->appConfig->getValueString(Application::APP_ID, self::LEGACY_KEY, ''), true);
		} catch (\Throwable) {
			try {
				$decoded = $this->appConfig->getValueArray(Application::APP_ID, self::LEGACY_KEY, []);
			} catch (\Throwable) {
				$decoded = null;
			}
		}
		$groups = [];
		foreach (is_array($decoded) ? $decoded : [] as $group) {
			if (is_string($group) && $group !== '') {
				$groups[] = $group;
			}
		}
		return array_values(array_unique($groups));
	}
}
