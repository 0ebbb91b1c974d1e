<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Settings;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Service\AppSettings;
use OCA\Istota\Settings\Admin;
use OCA\Istota\Settings\AdminSection;
use OCA\Istota\Settings\Personal;
use OCA\Istota\Settings\PersonalSection;
use OCA\Istota\Tests\Support\FakeSidecar;
use OCA\Istota\Tests\Support\Harness;
use OCA\Istota\Tests\Support\TestInitialState;
use OCP\AppFramework\Http\TemplateResponse;
use OCP\Settings\IIconSection;
use OCP\Settings\ISettings;
use OCP\Util;
use PHPUnit\Framework\TestCase;

/**
 * The two settings pages: registered in info.xml, rendered from the app's templates with
 * the Vue bundle and its mount point, and an initial state of exactly the contract's keys,
 * built without asking the sidecar.
 */
class SettingsPagesTest extends TestCase {
	private const SECRET = 'settings-page-test-shared-secret-0123456789-abcd';

	private Harness $h;
	private TestInitialState $state;

	protected function setUp(): void {
		// Nothing listens there: rendering must not need the sidecar.
		$this->h = new Harness(FakeSidecar::deadUrl(), self::SECRET);
		$this->h->directory->addUser('alice', 'Alice');
		$this->h->directory->addUser('root', 'Root', null, ['admin']);
		$this->state = new TestInitialState();
		Util::$scripts = [];
	}

	protected function tearDown(): void {
		$this->h->close();
	}

	private function personal(): Personal {
		return new Personal($this->state, $this->h->pageState(), $this->h->session);
	}

	private function admin(): Admin {
		return new Admin($this->state, $this->h->pageState(), $this->h->session);
	}

	public function testInfoXmlRegistersThePagesAndSections(): void {
		$info = simplexml_load_file(ISTOTA_REPO_ROOT . '/appinfo/info.xml');
		$this->assertSame(Admin::class, (string)$info->settings->admin);
		$this->assertSame(AdminSection::class, (string)$info->settings->{'admin-section'});
		$this->assertSame(Personal::class, (string)$info->settings->personal);
		$this->assertSame(PersonalSection::class, (string)$info->settings->{'personal-section'});
		$this->assertTrue(is_subclass_of(Admin::class, ISettings::class));
		$this->assertTrue(is_subclass_of(Personal::class, ISettings::class));
		$this->assertTrue(is_subclass_of(AdminSection::class, IIconSection::class));
		$this->assertTrue(is_subclass_of(PersonalSection::class, IIconSection::class));
	}

	public function testThePersonalPage(): void {
		$this->h->loginAs('alice');
		$page = $this->personal();
		$response = $page->getForm();
		$this->assertInstanceOf(TemplateResponse::class, $response);
		$this->assertSame([Application::APP_ID, 'personal-settings'], [$response->getApp(), $response->getTemplateName()]);
		$this->assertSame(['istota', 'istota'], [$page->getSection(), (new PersonalSection($this->h->l10n, $this->h->urls))->getID()]);
		$this->assertSame(['settings'], array_keys($this->state->provided));
		$this->assertSame([
			'botName' => 'Istota',
			'version' => Harness::APP_VERSION,
			'filesUrl' => '/index.php/route/files.view.index?dir=%2Fistota',
			'wsPath' => '/istota-ws/',
			'isAdmin' => false,
			'installCommand' => '',
		], json_decode($this->state->provided['settings'], true));
		$this->assertSame([], $this->h->http->requests, 'the page never waits for the sidecar');
	}

	public function testTheAdminPage(): void {
		$this->h->loginAs('root');
		$this->h->appConfig->setValueString(Application::APP_ID, AppSettings::KEY_BOT_NAME, 'Marvin');
		$this->h->directory->system['share_folder'] = '/Shared/';
		$page = $this->admin();
		$response = $page->getForm();
		$this->assertSame([Application::APP_ID, 'admin-settings'], [$response->getApp(), $response->getTemplateName()]);
		$this->assertSame('istota', $page->getSection());
		$state = json_decode($this->state->provided['settings'], true);
		$this->assertTrue($state['isAdmin']);
		$this->assertStringEndsWith('/istota install', $state['installCommand']);
		$this->assertStringStartsWith('sudo ' . Harness::APP_PATH . '/bin/', $state['installCommand']);
		$this->assertSame('Marvin', $state['botName']);
		$this->assertSame('/index.php/route/files.view.index?dir=%2FShared%2Fmarvin', $state['filesUrl']);
	}

	public function testPrioritiesAreInNextcloudsRanges(): void {
		foreach ([$this->personal(), $this->admin()] as $page) {
			$this->assertGreaterThanOrEqual(0, $page->getPriority());
			$this->assertLessThanOrEqual(100, $page->getPriority());
		}
		foreach ([new PersonalSection($this->h->l10n, $this->h->urls), new AdminSection($this->h->l10n, $this->h->urls)] as $section) {
			$this->assertSame('Istota', $section->getName());
			$this->assertGreaterThanOrEqual(0, $section->getPriority());
			$this->assertLessThanOrEqual(99, $section->getPriority());
			$this->assertSame('/apps/istota/img/app-dark.svg', $section->getIcon());
			$this->assertFileExists(ISTOTA_REPO_ROOT . '/img/app-dark.svg');
		}
	}

	/** @return array<string, array{0: string, 1: string}> */
	public function templates(): array {
		return [
			'personal' => ['personal-settings', 'istota-personal-settings'],
			'admin' => ['admin-settings', 'istota-admin-settings'],
		];
	}

	/**
	 * The template loads the front end's bundle (js/<name>.mjs, agreed by file name) and
	 * renders only its mount point.
	 *
	 * @dataProvider templates
	 */
	public function testTheTemplateLoadsTheBundleAndRendersItsMountPoint(string $template, string $bundle): void {
		ob_start();
		(static function (string $file): void {
			include $file;
		})(ISTOTA_REPO_ROOT . '/templates/' . $template . '.php');
		$html = trim((string)ob_get_clean());
		$this->assertSame('<div id="' . $bundle . '"></div>', $html);
		$this->assertSame([['istota', $bundle]], Util::$scripts);
	}

	public function testTheInitialStateNeverHoldsASecret(): void {
		$this->h->settings->ensureBotSecret();
		$this->h->settings->setBotPassword('bot-password-0123456789');
		foreach (['alice', 'root'] as $uid) {
			$this->h->loginAs($uid);
			$this->personal()->getForm();
			$personal = $this->state->provided['settings'];
			$this->admin()->getForm();
			$admin = $this->state->provided['settings'];
			foreach ([self::SECRET, $this->h->settings->botSecret(), 'bot-password-0123456789'] as $secret) {
				$this->assertStringNotContainsString($secret, $personal . $admin);
			}
			$this->assertSame(['botName', 'version', 'filesUrl', 'wsPath', 'isAdmin', 'installCommand'], array_keys(json_decode($admin, true)));
		}
	}
}
